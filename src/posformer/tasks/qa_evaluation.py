"""Evaluation of the `qa` job: predictions, best non-empty answers and null odds, the official report.

`QAEvaluator` is the Trainer's `evaluate` for both heads; `write` puts predictions.json,
answers.json, null_odds.json and eval_results.json in a directory (see `posformer.tasks.qa_job`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch

from posformer.atomic import write_json_atomic
from posformer.data.squad import QAExample
from posformer.tasks.squad_metric import squad_v2_evaluate, write_predictions

if TYPE_CHECKING:
    from posformer.tasks.qa_job import QAJobOptions

NULL_ODDS_CLIP = 1e9


def clip_null_odds(null_odds: dict[str, float]) -> dict[str, float]:
    """Null odds with +-inf (and nan) replaced by +-NULL_ODDS_CLIP, so JSON readers everywhere accept them."""
    clipped = {}
    for qid, value in null_odds.items():
        value = float(value)
        if math.isnan(value):
            value = NULL_ODDS_CLIP
        clipped[qid] = max(-NULL_ODDS_CLIP, min(NULL_ODDS_CLIP, value))
    return clipped


def qa_report(examples: Sequence[QAExample], predictions: dict[str, str], answers: dict[str, str],
              null_odds: dict[str, float]) -> dict[str, Any]:
    """The official report: exact/f1/HasAns/NoAns of `predictions` as they stand; best_* of the best
    non-empty `answers` under the best threshold over `null_odds`."""
    report = squad_v2_evaluate(examples, predictions)
    thresholded = squad_v2_evaluate(examples, answers, null_odds, na_prob_thresh=math.inf)
    return {**report, **{k: v for k, v in thresholded.items() if k.startswith("best_")}}


class QAEvaluator:
    """The Trainer's `evaluate`: model -> official report; keeps the latest predictions and clipped null odds."""

    def __init__(self, head: str, tokenizer, examples: Sequence[QAExample], o: QAJobOptions) -> None:
        if not examples:
            raise ValueError("no evaluation questions")
        self.head, self.tokenizer, self.examples, self.o = head, tokenizer, list(examples), o
        self.predictions: dict[str, str] = {}
        self.answers: dict[str, str] = {}
        self.null_odds: dict[str, float] = {}
        self.report: dict[str, Any] = {}
        if head == "span":
            from posformer.tasks.span_qa import span_eval_features

            self.features = span_eval_features(self.examples, tokenizer, o.max_seq_length, o.doc_stride)

    def predict(self, model: torch.nn.Module) -> tuple[dict[str, str], dict[str, str], dict[str, float]]:
        """(predictions, best non-empty answers, null odds) id -> value."""
        o = self.o
        if self.head == "span":
            from posformer.tasks.extractive_qa import span_logits
            from posformer.tasks.span_qa import postprocess_span_predictions

            start, end = span_logits(model, self.features, o.per_device_eval_batch_size)
            predictions, answers, null_odds = postprocess_span_predictions(
                self.examples, self.features, start, end, o.n_best_size, o.max_answer_length,
                o.null_score_diff_threshold, with_answers=True)
            return predictions, answers, null_odds
        from posformer.tasks.seq2seq_qa import predict_seq2seq

        return predict_seq2seq(model, self.tokenizer, self.examples, o.max_seq_length, o.doc_stride,
                               num_beams=o.num_beams, batch_size=o.per_device_eval_batch_size,
                               max_answer_tokens=o.max_answer_length,
                               null_score_diff_threshold=o.null_score_diff_threshold, with_answers=True)

    def __call__(self, model: torch.nn.Module) -> dict[str, float]:
        predictions, answers, null_odds = self.predict(model)
        self.predictions, self.answers, self.null_odds = predictions, answers, clip_null_odds(null_odds)
        self.report = qa_report(self.examples, self.predictions, self.answers, self.null_odds)
        return {k: float(v) for k, v in self.report.items()}

    def write(self, out_dir: str | Path, info: dict[str, Any]) -> dict[str, Any]:
        """Write predictions.json, answers.json, null_odds.json and eval_results.json (the report plus `info`)."""
        write_predictions(out_dir, self.predictions, self.null_odds)
        write_json_atomic(Path(out_dir) / "answers.json", self.answers)
        results = {**self.report, **info}
        write_json_atomic(Path(out_dir) / "eval_results.json", results)
        return results
