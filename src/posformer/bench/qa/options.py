"""The options of `posformer bench --qa`, shared by its span and seq2seq heads."""

from __future__ import annotations

from dataclasses import dataclass

from posformer.bench.options import PRECISION_CHOICES, ReportOptions
from posformer.utils.limits import MAX_BATCH, MAX_ITEMS, MAX_LENGTH, MAX_SEED, MAX_STEPS
from posformer.utils.options import check_options, option
from posformer.utils.validation import fail

HEADS = ("span", "seq2seq")


@dataclass
class QABenchOptions(ReportOptions):
    """Fine-tune all-MiniLM-L6-v2 for SQuAD v2 with posformer and with Hugging Face, alike."""

    threads: int | None = 2
    seed: int = option(0, "seed of the head init, the question sample and the batch order", minimum=0, maximum=MAX_SEED)
    json: str | None = option(
        None, "also write the results as JSON (atomically)", flag="--output", aliases=("--json",), metavar="PATH"
    )
    data: str | None = option(
        None, "SQuAD v2 JSON file (unset: the reconstructed dev set, or the shipped sample when it is missing)"
    )
    checkpoint: str | None = option(None, "BERT-family checkpoint (unset: the bundled all-MiniLM-L6-v2)", metavar="DIR")
    head: str = option(
        "span",
        "span: posformer's span head against BertForQuestionAnswering; seq2seq: BERT2BERT warm-started from the "
        "checkpoint against HF's EncoderDecoderModel (posformer.bench.qa.seq2seq)",
        choices=HEADS,
    )
    max_answer_tokens: int = option(30, "seq2seq: answer tokens generated at most", minimum=1, maximum=MAX_LENGTH)
    keep_null_windows: float = option(
        1.0,
        'seq2seq: share of the training windows whose target is "" that are kept (1: all, as the seed job)',
        low=0,
        high=1,
        low_open=True,
    )
    eval_batch_size: int = option(
        32, "seq2seq: windows per generation batch of the evaluation", minimum=1, maximum=MAX_BATCH
    )
    train_questions: int = option(
        2000, "cap on the training questions (seeded sample; 0: all)", minimum=0, maximum=MAX_ITEMS
    )
    eval_questions: int = option(
        300, "cap on the evaluation questions (seeded sample; 0: all)", minimum=0, maximum=MAX_ITEMS
    )
    steps: int = option(60, "optimizer steps of each model (the first is not timed)", minimum=2, maximum=MAX_STEPS)
    epochs: float | None = option(
        None, "train this many passes over the windows instead of --steps", low=0, high=1000, low_open=True
    )
    warmup_ratio: float = option(0.0, "share of the steps for a linear lr warm-up", low=0, high=1, high_open=True)
    batch_size: int = option(16, "windows per step", minimum=1, maximum=MAX_BATCH)
    lr: float = option(1e-4, "peak learning rate, decayed linearly to 0", low=0, low_open=True)
    max_seq_length: int = option(256, "tokens per window (question + context part)", minimum=1, maximum=MAX_LENGTH)
    doc_stride: int = option(64, "overlap of consecutive windows of a long context", minimum=1, maximum=MAX_LENGTH)
    block: int = option(5, "steps each model runs before the other takes over", minimum=1, maximum=MAX_STEPS)
    precision: str = option(
        "fp32",
        "both models train and predict in fp32, or in bf16 autocast over float32 weights (auto: bf16 where the CPU "
        "has bf16 units)",
        choices=PRECISION_CHOICES,
    )

    def check(self) -> None:
        """Raise `ValueError` naming the first bad option."""
        check_options(self)
        if not self.doc_stride < self.max_seq_length:
            fail("doc_stride", self.doc_stride, f"an integer < max_seq_length ({self.max_seq_length})")
