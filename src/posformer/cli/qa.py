"""`posformer qa`: the SQuAD v2 question-answering job's sub-commands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from posformer.cli.command import Command
from posformer.tasks.qa.job import GROUP_BATCHES
from posformer.tasks.qa.options import ANSWER_DEFAULTS as A
from posformer.tasks.qa.options import PRETRAINED_DEFAULTS as P
from posformer.tasks.qa.options import SCRATCH_DEFAULTS as S


def cmd_score(args: argparse.Namespace) -> int:
    """Print the official SQuAD v2.0 scores of a predictions file, as `evaluate-v2.0.py` does."""
    from posformer.checkpoints.atomic import write_text_atomic
    from posformer.data.squad import load_qa_file
    from posformer.tasks.qa.squad_metric import read_json_mapping, squad_v2_evaluate
    from posformer.utils.validation import is_number

    gold = load_qa_file(
        args.eval_file, args.context_column, args.question_column, args.answer_column, for_training=False
    )
    if args.out_file is not None and Path(args.out_file).is_dir():
        raise ValueError(f"--out-file {args.out_file} is a directory: expected the path of a JSON file to write")
    predictions = read_json_mapping(args.predictions, "predictions")
    bad = [qid for qid, text in predictions.items() if not isinstance(text, str)]
    if bad:
        raise ValueError(f"predictions file {args.predictions}: the values of {bad[:5]} are not strings")
    na_probs = None
    if args.na_probs is not None:
        na_probs = read_json_mapping(args.na_probs, "no-answer probabilities")
        bad = [qid for qid, p in na_probs.items() if not is_number(p)]
        if bad:
            raise ValueError(
                f"no-answer probabilities file {args.na_probs}: the values of {bad[:5]} are not finite numbers"
            )
    report = squad_v2_evaluate(gold.examples, predictions, na_probs, args.na_prob_thresh)
    text = json.dumps(report, indent=2)
    if args.out_file:
        write_text_atomic(args.out_file, text + "\n")
    print(text)
    return 0


def _options(args: argparse.Namespace):
    """The job options of a parsed `qa train` / `qa eval` command line."""
    from dataclasses import fields

    from posformer.tasks.qa.options import QAJobOptions

    return QAJobOptions(**{f.name: getattr(args, f.name) for f in fields(QAJobOptions) if hasattr(args, f.name)})


def cmd_train(args: argparse.Namespace) -> int:
    """`posformer qa train`: train, evaluate at the end, write the predictions and the report."""
    from posformer.tasks.qa.job import train_qa

    train_qa(_options(args))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """`posformer qa eval`: predict with a trained model, print and write the report."""
    from posformer.tasks.qa.job import eval_qa

    eval_qa(_options(args))
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    """`posformer qa ask`: answer questions about a text with a trained model, one line each."""
    import sys

    from posformer.tasks.qa.ask import ask, read_questions

    questions = read_questions(args.context, args.context_file, args.question or [], sys.stdin)
    for answer in ask(args.model, questions, _options(args)):
        print(json.dumps(answer.to_json(), ensure_ascii=False) if args.json else answer.describe())
    return 0


def _flag(parser: argparse.ArgumentParser, *names: str, **kwargs) -> None:
    """Add an option under its dashed names and, for run_seq2seq_qa.py command lines, the underscored ones."""
    spellings = list(names) + ["--" + n[2:].replace("-", "_") for n in names if "-" in n[2:]]
    parser.add_argument(*spellings, **kwargs)


def _add_data_flags(parser: argparse.ArgumentParser, training: bool) -> None:
    data = parser.add_argument_group("data (default: the shipped SQuAD v2 sample, one article held out)")
    _flag(
        data,
        "--dataset-name",
        dest="dataset_name",
        help="a Hugging Face dataset such as squad_v2 (needs `datasets` and network access)",
    )
    _flag(data, "--dataset-config-name", dest="dataset_config_name", help="the dataset's configuration")
    if training:
        _flag(
            data,
            "--train-file",
            dest="train_file",
            help="SQuAD JSON, or JSON/JSONL records with the columns below; without --eval-file, "
            "a fifth of its articles is held out for evaluation",
        )
    _flag(data, "--eval-file", dest="eval_file", help="evaluation data, same formats")
    _flag(data, "--context-column", dest="context_column", default="context")
    _flag(data, "--question-column", dest="question_column", default="question")
    _flag(data, "--answer-column", dest="answer_column", default="answers")
    if training:
        _flag(data, "--max-train-samples", dest="max_train_samples", type=int, help="keep the first N questions")
    _flag(data, "--max-eval-samples", dest="max_eval_samples", type=int, help="keep the first N eval questions")


def _add_predict_flags(parser: argparse.ArgumentParser, defaults_note: str, from_run: bool = False) -> None:
    """The prediction options; `from_run`: those left unset take the training run's (`qa eval`, `qa ask`)."""
    run = "the training run's, else " if from_run else ""
    _flag(
        parser,
        "--max-seq-length",
        dest="max_seq_length",
        type=int,
        help=f"tokens per window, question included ({defaults_note})",
    )
    _flag(
        parser,
        "--doc-stride",
        dest="doc_stride",
        type=int,
        help=f"tokens shared by consecutive context windows ({defaults_note})",
    )
    _flag(
        parser,
        "--max-answer-length",
        dest="max_answer_length",
        type=int,
        help=f"longest answer in tokens (default: {run}{A['max_answer_length']})",
    )
    _flag(
        parser,
        "--num-beams",
        dest="num_beams",
        type=int,
        help=f"seq2seq: beam search with this many beams (default: {run}{A['num_beams']}, greedy)",
    )
    _flag(
        parser,
        "--null-score-diff-threshold",
        dest="null_score_diff_threshold",
        type=float,
        help='seq2seq: answer only when the best answer\'s score beats the best "" score by more than this; '
        'span (run_qa.py): predict "" when the null score beats the best span\'s by more than this. '
        f"A larger value means fewer answers for seq2seq and more for span (default: {run}"
        f"{A['null_score_diff_threshold']:g}, where both agree)",
    )
    _flag(
        parser,
        "--n-best-size",
        dest="n_best_size",
        type=int,
        help=f"span: candidate starts/ends per window (default: {run}{A['n_best_size']})",
    )
    _flag(
        parser,
        "--per-device-eval-batch-size",
        dest="per_device_eval_batch_size",
        type=int,
        default=32,
        help="windows per prediction batch (default: 32)",
    )


def _add_train_arguments(train: argparse.ArgumentParser) -> None:
    _flag(
        train,
        "--model",
        "--model-name-or-path",
        dest="model",
        help="starting checkpoint (default: the bundled all-MiniLM-L6-v2). --head seq2seq: an encoder-decoder "
        "dir (T5, BERT2BERT, a qa train run) or a BERT dir, from which a BERT2BERT encoder-decoder is "
        "warm-started; --head span: a BERT-family dir",
    )
    _flag(train, "--head", choices=("seq2seq", "span"), default="seq2seq", help="default: seq2seq")
    _add_data_flags(train, training=True)
    _flag(
        train,
        "--per-device-train-batch-size",
        dest="per_device_train_batch_size",
        type=int,
        help="windows per step (see the defaults below)",
    )
    _flag(train, "--learning-rate", dest="learning_rate", type=float, help="peak learning rate, linear decay")
    _flag(
        train, "--num-train-epochs", dest="num_train_epochs", type=float, help="steps = ceil(windows / batch) * epochs"
    )
    _flag(train, "--max-steps", dest="max_steps", type=int, help="train this many steps instead")
    _flag(train, "--warmup-ratio", dest="warmup_ratio", type=float, help="share of steps for linear warm-up")
    _flag(
        train,
        "--group-by-length",
        dest="group_by_length",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="batch windows of similar length together (each batch is padded only to its longest window; "
        f"runs of {GROUP_BATCHES} batches are sorted by length) (default: on)",
    )
    _flag(train, "--weight-decay", dest="weight_decay", type=float, default=0.0, help="AdamW weight decay (default: 0)")
    _flag(
        train,
        "--keep-null-windows",
        dest="keep_null_windows",
        type=float,
        default=1.0,
        help="share of the training windows without an answer (unanswerable questions, windows that miss the "
        "answer) to train on, drawn with --seed; below 1, more of each step goes to finding answers "
        "(default: 1, all)",
    )
    _flag(
        train,
        "--dropout",
        dest="dropout",
        type=float,
        help="dropout probability of every dropout of the model (hidden, attention, feed-forward) while it is "
        "fine-tuned; 0 trains faster and suits a short run that sees each window once (default: the "
        "checkpoint's)",
    )
    _flag(
        train,
        "--calibration-fraction",
        dest="calibration_fraction",
        type=float,
        default=0.0,
        help="share of the training articles kept out of training to calibrate --null-score-diff-threshold "
        "after it: the threshold with the best F1 on them is used for the evaluation and stored for "
        "`qa eval` / `qa ask` (default: 0, no calibration: the threshold as given)",
    )
    _add_predict_flags(train, "default: 384 pretrained, 256 --from-scratch / 128 and 64")
    _flag(train, "--output-dir", dest="output_dir", default="runs/qa", help="default: runs/qa")
    _flag(train, "--eval-steps", dest="eval_steps", type=int, help="also evaluate every N steps")
    _flag(train, "--save-steps", dest="save_steps", type=int, default=500, help="checkpoint every N steps (500)")
    _flag(train, "--resume", action="store_true", help="continue from the newest valid checkpoint in --output-dir")
    _flag(train, "--seed", type=int, default=42, help="weights, data order, dropout (default: 42)")
    _flag(train, "--device", choices=("auto", "cpu", "cuda"), default="auto")
    _flag(train, "--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    _flag(train, "--no-progress", dest="progress", action="store_false", help="no progress bar")
    scratch = train.add_argument_group("from-scratch seq2seq model (--from-scratch)")
    _flag(
        scratch,
        "--from-scratch",
        dest="from_scratch",
        action="store_true",
        help="--head seq2seq without --model: train a small t5-preset model and a tokenizer of the training "
        "texts instead of warm-starting from all-MiniLM-L6-v2 (default: off)",
    )
    _flag(scratch, "--tokenizer", choices=("unigram", "bpe"), default="unigram", help="default: unigram")
    _flag(scratch, "--vocab-size", dest="vocab_size", type=int, default=4000, help="default: 4000")
    _flag(scratch, "--d-model", dest="d_model", type=int, default=128, help="default: 128")
    _flag(scratch, "--layers", type=int, default=2, help="encoder and decoder layers each (default: 2)")
    _flag(scratch, "--heads", type=int, default=4, help="attention heads (default: 4)")
    _flag(scratch, "--d-ff", dest="d_ff", type=int, default=512, help="feed-forward width (default: 512)")


def _add_eval_arguments(evaluate: argparse.ArgumentParser) -> None:
    _flag(evaluate, "--model", "--model-name-or-path", dest="model", required=True, help="the trained model")
    _flag(evaluate, "--head", choices=("seq2seq", "span"), help="default: the model's own head")
    _add_data_flags(evaluate, training=False)
    _add_predict_flags(evaluate, "default: the training run's, else 384 / 128", from_run=True)
    _flag(evaluate, "--output-dir", dest="output_dir", help="default: the --model dir")


def _add_ask_arguments(ask: argparse.ArgumentParser) -> None:
    _flag(
        ask,
        "--model",
        "--model-name-or-path",
        dest="model",
        required=True,
        help="a `qa train` output dir (its newest valid checkpoint), a checkpoint or a model dir",
    )
    _flag(ask, "--context", help="the text to answer from (default: none; or --context-file)")
    _flag(ask, "--context-file", dest="context_file", help="read the context from this UTF-8 file (default: none)")
    _flag(
        ask,
        "--question",
        action="append",
        help="a question about the context (repeatable); without it, JSON lines "
        '{"context": ..., "question": ...} are read from stdin, blank lines skipped (default: none)',
    )
    _flag(
        ask,
        "--json",
        action="store_true",
        help='print one JSON object per question: {"question", "answer" ("" for none), "has_answer", '
        '"score" (null when there is no candidate), "needed", "best_answer"} (default: off, one '
        "readable line)",
    )
    _add_predict_flags(ask, "default: the training run's, else 384 / 128", from_run=True)


def _add_score_arguments(score: argparse.ArgumentParser) -> None:
    score.add_argument(
        "--eval-file",
        dest="eval_file",
        required=True,
        help="gold data: SQuAD JSON, or JSON/JSONL records with the named columns",
    )
    score.add_argument("--predictions", required=True, help="predictions.json: {id: text}")
    score.add_argument("--na-probs", dest="na_probs", help="null_odds.json / no-answer probabilities: {id: float}")
    score.add_argument(
        "--na-prob-thresh",
        dest="na_prob_thresh",
        type=float,
        default=1.0,
        help="predict no answer when the no-answer probability exceeds this (default: 1.0)",
    )
    score.add_argument("--out-file", dest="out_file", help="also write the scores (JSON) here")
    score.add_argument("--context-column", dest="context_column", default="context")
    score.add_argument("--question-column", dest="question_column", default="question")
    score.add_argument("--answer-column", dest="answer_column", default="answers")


SCORE = Command(
    "score",
    help="the official SQuAD v2.0 scores of a predictions file",
    description="Print the official SQuAD v2.0 evaluation (exact, f1, HasAns_*, NoAns_*, and best_* with "
    '--na-probs) of a predictions file (id -> answer text, "" for no answer) against a data '
    "file: a drop-in for the official evaluate-v2.0.py, with the same numbers.",
    add_arguments=_add_score_arguments,
    run=cmd_score,
)
TRAIN = Command(
    "train",
    help="train a SQuAD v2 model (seq2seq: T5 or BERT2BERT; or an extractive span head)",
    description="Train SQuAD v2 question answering with the flags of Hugging Face's run_seq2seq_qa.py "
    '(dashed or underscored). --head seq2seq (default) generates the answer ("" for none) '
    "from each doc_stride window, from an encoder-decoder checkpoint or a BERT2BERT model "
    "warm-started from a BERT checkpoint (Rothe et al. 2020; by default all-MiniLM-L6-v2); "
    "--head span predicts start/end tokens. Evaluation runs at the "
    "end (and every --eval-steps); checkpoints, metrics.jsonl, loss.png, run_config.yaml, "
    "predictions.json, answers.json, null_odds.json and eval_results.json go to --output-dir.",
    epilog=f"Defaults with a pretrained model (--model, or none: all-MiniLM-L6-v2): batch "
    f"{P['per_device_train_batch_size']}, lr {P['learning_rate']}, {P['num_train_epochs']:g} epochs, "
    f"max_seq_length {P['max_seq_length']}, doc_stride {P['doc_stride']}, no warm-up (the seed job's). "
    f"CPU-friendly defaults for the from-scratch seq2seq model (--from-scratch): batch "
    f"{S['per_device_train_batch_size']}, lr {S['learning_rate']}, {S['num_train_epochs']:g} epochs, "
    f"max_seq_length {S['max_seq_length']}, doc_stride {S['doc_stride']}, warm-up ratio "
    f"{S['warmup_ratio']}, a t5-preset model of --d-model/--layers/--heads/--d-ff and a tokenizer "
    "trained on the training texts.",
    add_arguments=_add_train_arguments,
    run=cmd_train,
)
EVAL = Command(
    "eval",
    help="evaluate a trained QA model on SQuAD v2 data",
    description="Predict with a trained model (a `qa train` output dir, which stands for its newest valid "
    "checkpoint, a checkpoint, or a model dir) and print the official SQuAD v2 report; write "
    "predictions.json, answers.json (best non-empty answers), null_odds.json (+-inf clipped to "
    "+-1e9) and eval_results.json into --output-dir (default: the model dir).",
    add_arguments=_add_eval_arguments,
    run=cmd_eval,
)
ASK = Command(
    "ask",
    help="ask a trained QA model questions about a text",
    description="Answer questions about a text with a trained model (a `qa train` output dir, which stands "
    "for its newest valid checkpoint, a checkpoint, or a model dir): each --question on --context "
    'or --context-file, or, with no --question, JSON lines {"context": ..., "question": ...} '
    "on stdin. Long contexts go through the doc_stride windows of evaluation. Prints each answer, "
    "or that there is none, with its score, one line per question (--json: one JSON object).",
    epilog='score: how much the model prefers its best answer to "no answer", the negated null odds of '
    "null_odds.json. span: the best span's start + end logits minus the [CLS] (no-answer) logits, the "
    'smallest over the windows; seq2seq: log p(best answer) minus log p("") of the best "" window. '
    "Both are log-odds: above 0 the model prefers its answer. needed: the score an answer must reach "
    "to be given, from --null-score-diff-threshold (the training run's, calibrated when it was trained "
    "with --calibration-fraction): its negation for span (reached at >=), the threshold itself for "
    "seq2seq (to beat). When there is no answer, the best candidate is shown with its score.",
    add_arguments=_add_ask_arguments,
    run=cmd_ask,
)
COMMAND = Command(
    "qa",
    help="SQuAD v2 question answering: train, eval, score, ask",
    description="The SQuAD v2 question-answering job.",
    subcommands=(SCORE, TRAIN, EVAL, ASK),
)
