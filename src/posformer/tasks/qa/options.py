"""The options of the QA job (`qa train`, `qa eval`, `qa ask`): one dataclass whose fields give the flags
(`posformer.cli.qa`), the defaults of each kind of model, and the checks that name each bad option by its flag."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from posformer.train.knobs import DEVICES, PRECISIONS
from posformer.utils.limits import (
    MAX_BATCH,
    MAX_BEAMS,
    MAX_FF,
    MAX_HEADS,
    MAX_ITEMS,
    MAX_LAYERS,
    MAX_LENGTH,
    MAX_SEED,
    MAX_STEPS,
    MAX_VOCAB,
    MAX_WIDTH,
)
from posformer.utils.options import check_options as check_declared_options
from posformer.utils.options import flag_spelling, option
from posformer.utils.validation import check_choice, fail

HEADS = ("seq2seq", "span")
ANSWER_DEFAULTS = dict(
    max_answer_length=30, num_beams=1, null_score_diff_threshold=0.0, n_best_size=20, null_score="decoder"
)
NULL_SCORES = ("decoder", "encoder-span", "both")
PRETRAINED_DEFAULTS = dict(
    per_device_train_batch_size=12,
    learning_rate=3e-5,
    num_train_epochs=2.0,
    max_seq_length=384,
    doc_stride=128,
    warmup_ratio=0.0,
    **ANSWER_DEFAULTS,
)
SCRATCH_DEFAULTS = dict(
    per_device_train_batch_size=16,
    learning_rate=1e-3,
    num_train_epochs=10.0,
    max_seq_length=256,
    doc_stride=64,
    warmup_ratio=0.05,
    **ANSWER_DEFAULTS,
)
PREDICTION_OPTIONS = ("max_seq_length", "doc_stride", *ANSWER_DEFAULTS)


GROUP_BATCHES = 16  # --group-by-length sorts runs of this many batches by window length
WINDOWS_DEFAULT = "default: qa train: 384 pretrained, 256 --from-scratch; qa eval / ask: the training run's, else 384"
STRIDE_DEFAULT = "default: qa train: 128 pretrained, 64 --from-scratch; qa eval / ask: the training run's, else 128"
FROM_RUN = "qa eval / ask: the training run's, else "
DATA_GROUP = (
    "data (default: the shipped SQuAD v2 sample, three of its fifteen articles held out for evaluation, and twenty "
    "more shipped articles for training)"
)
SCRATCH_GROUP = "from-scratch seq2seq model (--from-scratch)"


COLUMNS = ("context_column", "question_column", "answer_column")


@dataclass
class QAColumns:
    """Where a data file's records keep the context, the question and the answers."""

    context_column: str = option("context", "the records' context column")
    question_column: str = option("question", "the records' question column")
    answer_column: str = option("answers", "the records' answers column")


@dataclass
class QAJobOptions(QAColumns):
    """Every option of `qa train` / `qa eval` / `qa ask`, flags and defaults; None means "the default for this kind
    of model" (`PRETRAINED_DEFAULTS`, `SCRATCH_DEFAULTS`) or, in `qa eval` / `qa ask`, the training run's."""

    head: str | None = option(
        None,
        "seq2seq generates the answer, span predicts its start and end tokens (qa eval: unset, the model's own)",
        choices=HEADS,
    )
    model: str | None = option(
        None,
        "qa train: the starting checkpoint (default: the bundled all-MiniLM-L6-v2): --head seq2seq: an "
        "encoder-decoder dir (T5, BERT2BERT, a qa train run) or a BERT dir, from which a BERT2BERT encoder-decoder "
        "is warm-started; --head span: a BERT-family dir. qa eval / ask: the trained model (a qa train output dir, "
        "its newest valid checkpoint; a checkpoint; or a model dir)",
        aliases=("--model-name-or-path",),
    )
    dataset_name: str | None = option(
        None, "a Hugging Face dataset such as squad_v2 (needs `datasets` and network access)"
    )
    dataset_config_name: str | None = option(None, "the dataset's configuration")
    train_file: str | None = option(
        None,
        "SQuAD JSON, or JSON/JSONL records with the columns below; without --eval-file, a fifth of its articles is "
        "held out for evaluation",
    )
    eval_file: str | None = option(None, "evaluation data, same formats")
    max_train_samples: int | None = option(None, "keep the first N questions", minimum=1, maximum=MAX_ITEMS)
    max_eval_samples: int | None = option(None, "keep the first N eval questions", minimum=1, maximum=MAX_ITEMS)
    per_device_train_batch_size: int | None = option(
        None, "windows per step (see the defaults below)", minimum=1, maximum=MAX_BATCH
    )
    per_device_eval_batch_size: int = option(32, "windows per prediction batch", minimum=1, maximum=MAX_BATCH)
    learning_rate: float | None = option(None, "peak learning rate, linear decay", low=0, low_open=True)
    num_train_epochs: float | None = option(None, "steps = ceil(windows / batch) * epochs", low=0, low_open=True)
    max_steps: int | None = option(None, "train this many steps instead", minimum=1, maximum=MAX_STEPS)
    warmup_ratio: float | None = option(None, "share of steps for linear warm-up", low=0, high=1)
    weight_decay: float = option(0.0, "AdamW weight decay", low=0)
    max_seq_length: int | None = option(
        None, f"tokens per window, question included ({WINDOWS_DEFAULT})", minimum=1, maximum=MAX_LENGTH
    )
    doc_stride: int | None = option(
        None, f"tokens shared by consecutive context windows ({STRIDE_DEFAULT})", minimum=1, maximum=MAX_LENGTH
    )
    max_answer_length: int | None = option(
        None,
        f"longest answer in tokens (default: {FROM_RUN}{ANSWER_DEFAULTS['max_answer_length']})",
        minimum=1,
        maximum=MAX_LENGTH,
    )
    num_beams: int | None = option(
        None,
        f"seq2seq: beam search with this many beams (default: {FROM_RUN}{ANSWER_DEFAULTS['num_beams']}, greedy)",
        minimum=1,
        maximum=MAX_BEAMS,
    )
    null_score_diff_threshold: float | None = option(
        None,
        'seq2seq: answer only when the best answer\'s score beats the lowest "" score of its windows by more than '
        'this; span (run_qa.py): predict "" when the null score beats the best span\'s by more than this. A larger '
        f"value means fewer answers for seq2seq and more for span (default: {FROM_RUN}"
        f"{ANSWER_DEFAULTS['null_score_diff_threshold']:g}, where both agree)",
    )
    n_best_size: int | None = option(
        None,
        f"span: candidate starts/ends per window (default: {FROM_RUN}{ANSWER_DEFAULTS['n_best_size']})",
        minimum=1,
        maximum=MAX_BEAMS,
    )
    null_score: str | None = option(
        None,
        'seq2seq: what decides "no answer": decoder (the "" generation\'s score against the best answer\'s), '
        "encoder-span (the encoder's span head of --encoder-span-loss: its null score against its best span, "
        "run_qa.py's rule), or both (the two null odds added, as the Retro-Reader of Zhang et al. 2021 adds its "
        "two verifiers' scores); the answer is always the decoder's "
        f"(default: {FROM_RUN}{ANSWER_DEFAULTS['null_score']})",
        choices=NULL_SCORES,
    )
    output_dir: str | None = option(None, "where the outputs go (qa eval: unset, the --model dir)")
    eval_steps: int | None = option(None, "also evaluate every N steps", minimum=1, maximum=MAX_STEPS)
    save_steps: int = option(500, "checkpoint every N steps", minimum=1, maximum=MAX_STEPS)
    seed: int = option(42, "weights, data order, dropout", minimum=0, maximum=MAX_SEED)
    device: str = option("auto", "where the model runs", choices=DEVICES)
    precision: str = option(
        "fp32",
        "fp32; bf16 / fp16 autocast over float32 weights; or auto: bf16 where the CPU or GPU has bf16 units, else "
        "fp32 (the run records what it used; qa eval / ask: the precision predictions are computed in)",
        choices=PRECISIONS,
    )
    resume: bool = option(False, "continue from the newest valid checkpoint in --output-dir")
    from_scratch: bool = option(
        False,
        "--head seq2seq without --model: train a small t5-preset model and a tokenizer of the training texts "
        "instead of warm-starting from all-MiniLM-L6-v2",
    )
    tokenizer: str = option("unigram", "the tokenizer trained on the training texts", choices=("unigram", "bpe"))
    vocab_size: int = option(4000, "its vocabulary size", minimum=1, maximum=MAX_VOCAB)
    d_model: int = option(128, "model width", minimum=1, maximum=MAX_WIDTH)
    layers: int = option(2, "encoder and decoder layers each", minimum=1, maximum=MAX_LAYERS)
    heads: int = option(4, "attention heads", minimum=1, maximum=MAX_HEADS)
    d_ff: int = option(512, "feed-forward width", minimum=1, maximum=MAX_FF)
    group_by_length: bool = option(
        True,
        "batch windows of similar length together (each batch is padded only to its longest window; runs of "
        f"{GROUP_BATCHES} batches are sorted by length) (default: on)",
    )
    keep_null_windows: float = option(
        1.0,
        "share of the training windows without an answer (unanswerable questions, windows that miss the answer) to "
        "train on, drawn with --seed; below 1, more of each step goes to finding answers (default: 1, all)",
        low=0,
        high=1,
        low_open=True,
    )
    cross_attention_init: str = option(
        "random",
        "--head seq2seq warm-started from a BERT: how the decoder's new cross-attention starts: random (BERT's "
        "initialisation, as Hugging Face's EncoderDecoderModel) or self_attention (a copy of the same layer's "
        "trained self-attention, so that the decoder starts by attending to context tokens like its own) "
        "(default: random)",
    )
    decoder_layers: int | None = option(
        None,
        "--head seq2seq warm-started from a BERT: the decoder keeps the BERT's first this many layers (fewer: faster "
        "steps, and the new cross-attention a larger share of the decoder) (default: all)",
        minimum=1,
        maximum=MAX_LAYERS,
    )
    pointer_generator: bool = option(
        False,
        "--head seq2seq warm-started from a BERT: the decoder may also copy context tokens, a pointer-generator "
        "(See et al. 2017) whose copy attention also learns to continue a copied span (see "
        "posformer.modules.pointer_generator); Hugging Face's EncoderDecoderModel has no such layer (default: off)",
    )
    encoder_span_loss: float = option(
        0.0,
        "--head seq2seq: also train a span head on the encoder (start and end of the answer, the first token for "
        "none) and add this times its loss to the decoder's: the encoder learns to mark the answer for the decoder "
        "to find (multi-task learning); the span head answers nothing, and decides 'no answer' only as --null-score "
        "says (default: 0, off)",
        low=0,
    )
    dropout: float | None = option(
        None,
        "dropout probability of every dropout of the model (hidden, attention, feed-forward) while it is "
        "fine-tuned; 0 trains faster and suits a short run that sees each window once (default: the checkpoint's)",
        low=0,
        high=1,
        high_open=True,
    )
    calibration_fraction: float = option(
        0.0,
        "share of the training articles kept out of training to calibrate --null-score-diff-threshold after it: "
        "the threshold with the best F1 on them is used for the evaluation and stored for `qa eval` / `qa ask` "
        "(default: 0, no calibration: the threshold as given)",
        low=0,
        high=1,
        high_open=True,
    )
    progress: bool = option(True, "no progress bar", flag="--no-progress")

    def resolved(self, defaults: dict[str, Any]) -> "QAJobOptions":
        """A copy whose unset (None) options take `defaults`."""
        return dataclasses.replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})


@dataclass
class AskOptions(QAJobOptions):
    """`qa ask`: the questions and how the answers are printed, besides the prediction options."""

    context: str | None = option(None, "the text to answer from (default: none; or --context-file)")
    context_file: str | None = option(None, "read the context from this UTF-8 file (default: none)")
    question: list[str] | None = option(
        None,
        'a question about the context (repeatable); without it, JSON lines {"context": ..., "question": ...} are '
        "read from stdin, blank lines skipped (default: none)",
        repeatable=True,
    )
    json: bool = option(
        False,
        'print one JSON object per question: {"question", "answer" ("" for none), "has_answer", "score" (null when '
        'there is no candidate), "needed", "best_answer"} (default: off, one readable line)',
    )


@dataclass(kw_only=True)
class ScoreOptions(QAColumns):
    """`qa score`: a predictions file against its gold data, as the official `evaluate-v2.0.py`."""

    eval_file: str = option(help="gold data: SQuAD JSON, or JSON/JSONL records with the named columns")
    predictions: str = option(help="predictions.json: {id: text}")
    na_probs: str | None = option(None, "null_odds.json / no-answer probabilities: {id: float}")
    na_prob_thresh: float = option(1.0, "predict no answer when the no-answer probability exceeds this")
    out_file: str | None = option(None, "also write the scores (JSON) here")


def check_options(o: QAJobOptions) -> None:
    """Every set option, named by its flag (`--doc-stride=0 is invalid: expected a positive integer`)."""
    from posformer.hf.bert2bert import CROSS_ATTENTION_INITS  # beside the warm start, whose module imports torch

    check_declared_options(o, name_of=flag_spelling)
    check_choice("--cross-attention-init", o.cross_attention_init, CROSS_ATTENTION_INITS)
    if o.from_scratch and (o.head != "seq2seq" or o.model is not None):
        fail(
            "--from-scratch",
            True,
            "only with --head seq2seq and without --model (it trains a new t5-preset model and tokenizer)",
        )
    if o.encoder_span_loss and o.head != "seq2seq":
        fail("--encoder-span-loss", o.encoder_span_loss, "0 without --head seq2seq (it trains a generative model)")
    if o.null_score not in (None, "decoder") and o.head == "span":
        fail("--null-score", o.null_score, "decoder (the default) with --head span, which has its own null score")
    if o.max_seq_length is not None and o.doc_stride is not None and o.doc_stride >= o.max_seq_length:
        fail("--doc-stride", o.doc_stride, f"an integer smaller than --max-seq-length ({o.max_seq_length})")
