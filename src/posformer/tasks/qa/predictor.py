"""What every QA predictor shares: it is bound to its questions and answers them with a model.

    predictor = SpanPredictor(tokenizer, examples, 384, 128)           # or Seq2SeqPredictor(...)
    predictions, null_odds, answers = predictor.predict(model)
    evaluator = QAEvaluator(predictor)                                 # the metric, the files, the report

One predictor per head: `posformer.tasks.qa.extractive.SpanPredictor` (start/end logits over
doc_stride windows) and `posformer.tasks.qa.seq2seq.Seq2SeqPredictor` (generation in every window).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence

from torch import nn

from posformer.tasks.qa.windows import QAExampleLike
from posformer.utils.validation import check_int, fail


class QAPredictions(NamedTuple):
    """One entry per question id, in the official file formats.

    predictions: the answer text, "" for no answer (the threshold applied).
    null_odds: the null ("no answer") score minus the best answer's score; +-inf when a
        question has no candidate of one kind.
    answers: the best non-empty answer whatever the null score, "" only when there is none.
    """

    predictions: dict[str, str]
    null_odds: dict[str, float]
    answers: dict[str, str]


class QAPredictor(Protocol):
    """A head's way of answering `examples`; built once, called with each model to evaluate."""

    examples: Sequence[QAExampleLike]
    logits_dtype: str | None  # the dtype the last `predict` computed the logits in ("bfloat16" under bf16 autocast)

    def predict(self, model: nn.Module) -> QAPredictions:
        """Answer every question of `examples` with `model`."""
        ...


def check_windows(examples: Sequence[QAExampleLike], max_seq_length: int, doc_stride: int) -> None:
    """What every predictor needs: at least one question, and windows that advance (doc_stride < max_seq_length)."""
    if not examples:
        fail("examples", examples, "at least one question to answer")
    check_int("max_seq_length", max_seq_length)
    check_int("doc_stride", doc_stride, minimum=0)
    if doc_stride >= max_seq_length:
        fail("doc_stride", doc_stride, f"an integer < max_seq_length ({max_seq_length})")
