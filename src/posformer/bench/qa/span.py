"""Extractive QA (SQuAD v2) with posformer against Hugging Face, trained identically in the same run.

Both sides fine-tune all-MiniLM-L6-v2 with a span head: posformer's
`from_hf(dir, head="span_qa")` and transformers' `BertForQuestionAnswering.from_pretrained(dir)`,
from the same weights (the span head too: one seeded draw, N(0, initializer_range), copied
into both). Like for like:

- data: the questions of an article-disjoint split (`split_by_article`, 20% of the articles
  held out) of the SQuAD v2 file, tokenized ONCE with the checkpoint's tokenizer into
  run_qa.py windows (`span_train_tensors`); the same pre-drawn batches (`FeatureBatches`
  order, each cut to its longest row) go to both models, step by step;
- optimizer: fused AdamW (HF Trainer's default on torch >= 2.8; the same lr, betas, eps, weight
  decay on linear weights only),
  gradient clipping at 1.0, a linear warm-up over `warmup_ratio` of the steps and a linear
  decay to 0 (`get_linear_schedule_with_warmup`, as HF's Trainer), float32, the same seed;
- loss: the span loss over each window's real tokens (HF's model in `PaddingMaskedSpanLoss`:
  its own loss would also softmax over the padding);
- dropout: OFF in both. The checkpoint's config.json (hidden and attention dropout 0.1) is
  rewritten with 0 before either library loads it. With dropout on, the two libraries draw
  different masks, so their losses would drift apart from the first step and the
  comparison could not show that they compute the same thing; with it off they are the same
  function of the same weights and their first-step losses agree to float32 rounding.

Speed: training tokens/s, counting non-pad tokens (attention_mask ones) of the timed
steps. Timed per step: zero_grad, forward with the loss, backward, clipping, the AdamW
and schedule steps and reading the loss. The first step of each model is a warm-up and not
timed. The models alternate in blocks of `block` steps (posformer, then HF, ...), so
outside load on a shared machine falls on both; ratio = posformer / HF tokens/s (above 1:
posformer is faster), and the median of the per-block ratios is reported beside it.

Accuracy: both are evaluated the same way, posformer's span post-processing (n-best 20,
max answer 30 tokens, threshold 0) over all windows of a question, then the official
SQuAD v2 metric (`posformer.tasks.qa.squad_metric`): EM, F1, HasAns_f1, NoAns_f1.

    posformer bench --qa --help
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from posformer.bench.qa.compare import Sides, compare
from posformer.bench.qa.options import QABenchOptions
from posformer.bench.qa.setup import load_models
from posformer.tasks.qa.extractive import SpanPredictor, span_train_tensors


def build_span(
    train: list, held: list, tokenizer: Any, directory: Path, seed: int, max_seq_length: int, doc_stride: int
) -> Sides:
    """posformer's and HF's span models from `directory`, the span windows of `train`, a predictor of `held`."""
    ours, theirs = load_models(directory, seed)
    return Sides(
        ours,
        theirs,
        span_train_tensors(train, tokenizer, max_seq_length, doc_stride, ours.cfg),
        SpanPredictor(tokenizer, held, max_seq_length, doc_stride),
        {
            "hf_attention": getattr(theirs.config, "_attn_implementation", None),
            "posformer_attention": ours.cfg.attn_impl,
        },
    )


def run(options: QABenchOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train and evaluate both span models (`compare.compare`)."""

    def build(train: list, held: list, tokenizer: Any, directory: Path, seed: int) -> Sides:
        return build_span(train, held, tokenizer, directory, seed, options.max_seq_length, options.doc_stride)

    return compare("span", build, options, log)
