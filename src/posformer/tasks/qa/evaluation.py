"""Evaluation of the `qa` job: predictions, best non-empty answers and null odds, the official report.

`QAEvaluator(predictor)` is the Trainer's `evaluate` for both heads (the predictor of the head
answers, see `posformer.tasks.qa.predictor`); `write` puts predictions.json, answers.json,
null_odds.json and eval_results.json in a directory (see `posformer.tasks.qa.job`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import torch

from posformer.data.squad import QAExample
from posformer.tasks.qa.predictor import QAPredictor
from posformer.tasks.qa.squad_metric import squad_v2_evaluate
from posformer.train.precision import autocast
from posformer.utils.safe_write import write_json_set_atomic

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


def qa_report(
    examples: Sequence[QAExample], predictions: dict[str, str], answers: dict[str, str], null_odds: dict[str, float]
) -> dict[str, Any]:
    """The official report: exact/f1/HasAns/NoAns of `predictions` as they stand; best_* of the best
    non-empty `answers` under the best threshold over `null_odds`."""
    report = squad_v2_evaluate(examples, predictions)
    thresholded = squad_v2_evaluate(examples, answers, null_odds, na_prob_thresh=math.inf)
    return {**report, **{k: v for k, v in thresholded.items() if k.startswith("best_")}}


class QAEvaluator:
    """The Trainer's `evaluate` for any head: model -> `predictor`'s answers -> the official report.

    precision: what the predictions are computed in, whatever the caller's autocast ("fp32" by default: the
    official scores and the null odds from float32 logits, since bf16's 8-bit mantissa ties close span scores).
    Keeps the latest predictions, best non-empty answers, clipped null odds and report, for `write`.
    """

    def __init__(self, predictor: QAPredictor, precision: str = "fp32") -> None:
        self.predictor, self.precision = predictor, precision
        self.examples = list(predictor.examples)
        self.predictions: dict[str, str] = {}
        self.answers: dict[str, str] = {}
        self.null_odds: dict[str, float] = {}
        self.report: dict[str, Any] = {}

    def __call__(self, model: torch.nn.Module) -> dict[str, float]:
        """The official report of `model`'s answers (exact, f1, HasAns_*, NoAns_*, best_*) as floats."""
        device = next(model.parameters()).device
        with torch.no_grad(), autocast(self.precision, device):
            predictions, null_odds, answers = self.predictor.predict(model)
        self.predictions, self.answers, self.null_odds = predictions, answers, clip_null_odds(null_odds)
        self.report = qa_report(self.examples, self.predictions, self.answers, self.null_odds)
        return {k: float(v) for k, v in self.report.items()}

    def write(self, out_dir: str | Path, info: dict[str, Any]) -> dict[str, Any]:
        """Write predictions.json, null_odds.json (the files the official script reads), answers.json and
        eval_results.json (the report, the dtype of the logits it was computed from, and `info`) as one set: all
        new, or, when one cannot be written (a full disk), all as they were, never a mix of two evaluations."""
        results = {**self.report, "logits_dtype": self.predictor.logits_dtype, **info}
        files = {
            "predictions.json": {str(k): str(v) for k, v in self.predictions.items()},
            "null_odds.json": {str(k): float(v) for k, v in self.null_odds.items()},
            "answers.json": self.answers,
            "eval_results.json": results,
        }
        write_json_set_atomic(out_dir, files)
        return results
