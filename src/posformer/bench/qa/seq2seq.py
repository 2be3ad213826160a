"""Generative QA (SQuAD v2) with posformer against Hugging Face's `EncoderDecoderModel`, in one run.

Both sides fine-tune the same BERT2BERT (Rothe et al. 2020) warm-started from all-MiniLM-L6-v2
(`seq2seq_models.load_bert2bert_pair`: equal tensors, the fresh cross-attention included),
like for like, as `posformer.bench.qa.span` does for the span head:

- data: the article-disjoint split of the SQuAD v2 file, tokenized once into the seq2seq job's
  windows (`seq2seq_train_tensors`: "question: ... context: ..." windows, the answer text then
  [SEP] as the target, "" in the windows without it); optionally a seeded share of the ""
  windows (`keep_null_windows`); the same pre-drawn batches, each cut to its longest row;
- training: teacher forcing on the labels (decoder inputs = [CLS] + labels shifted right), the
  token cross-entropy, AdamW, clipping at 1.0, linear warm-up and decay, float32, dropout off,
  models alternating in blocks of `block` steps; tokens/s counts the encoder's real tokens;
- evaluation: posformer's `Seq2SeqPredictor` for both (greedy, "" scored in every window, the
  best answer across windows, threshold 0) and the official SQuAD v2 metric; HF's model
  generates with HF's `generate` (`HFGenerativeQA`).

    posformer bench --qa --head seq2seq --help
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from posformer.bench.qa.compare import Sides, compare
from posformer.bench.qa.options import QABenchOptions
from posformer.bench.qa.seq2seq_models import load_bert2bert_pair
from posformer.tasks.qa.null_answers import keep_null_windows, seq2seq_null_windows
from posformer.tasks.qa.seq2seq import Seq2SeqPredictor, end_token_id, seq2seq_train_tensors


def build_seq2seq(
    train: list,
    held: list,
    tokenizer: Any,
    directory: Path,
    seed: int,
    max_seq_length: int,
    doc_stride: int,
    max_answer_tokens: int,
    keep_null: float,
    eval_batch_size: int,
) -> Sides:
    """The BERT2BERT pair from `directory`, the seq2seq windows of `train` (a share `keep_null` of the ""
    windows kept), a greedy predictor of `held`."""
    ours, theirs = load_bert2bert_pair(directory, tokenizer, seed)
    end = end_token_id(ours.cfg)
    features = seq2seq_train_tensors(train, tokenizer, max_seq_length, doc_stride, max_answer_tokens, end)
    every = int(features["input_ids"].shape[0])
    features = keep_null_windows(features, seq2seq_null_windows(features, end), keep_null, seed)
    predictor = Seq2SeqPredictor(
        tokenizer, held, max_seq_length, doc_stride, batch_size=eval_batch_size, max_answer_tokens=max_answer_tokens
    )
    return Sides(
        ours,
        theirs,
        features,
        predictor,
        {"max_answer_tokens": max_answer_tokens, "keep_null_windows": keep_null, "all_train_windows": every},
    )


def run(options: QABenchOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train and evaluate both BERT2BERT models (`compare.compare`)."""

    def build(train: list, held: list, tokenizer: Any, directory: Path, seed: int) -> Sides:
        return build_seq2seq(
            train,
            held,
            tokenizer,
            directory,
            seed,
            options.max_seq_length,
            options.doc_stride,
            options.max_answer_tokens,
            options.keep_null_windows,
            options.eval_batch_size,
        )

    return compare("seq2seq", build, options, log)
