"""Null-window sampling and null-threshold calibration: the calibrated threshold reaches the best F1 any
threshold reaches, under each head's own answer rule."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch

from posformer.tasks.qa.null_answers import (
    calibrate_null_threshold,
    keep_null_windows,
    seq2seq_null_windows,
    span_null_windows,
)
from posformer.tasks.qa.predictor import QAPredictions
from posformer.tasks.qa.squad_metric import squad_v2_evaluate


def test_keep_null_windows_keeps_every_answer_window_and_a_share_of_the_rest():
    null = torch.arange(2000) % 3 != 0
    features = {"input_ids": torch.arange(2000)[:, None].repeat(1, 4), "start_positions": torch.arange(2000)}
    kept = keep_null_windows(features, null, 0.25, seed=3)
    rows = kept["start_positions"]
    assert torch.equal(kept["input_ids"][:, 0], rows) and bool((rows[1:] > rows[:-1]).all())  # aligned, in order
    assert set(torch.arange(0, 2000, 3).tolist()) <= set(rows.tolist())
    share = (~(rows % 3 == 0)).sum().item() / null.sum().item()
    assert 0.2 < share < 0.3
    assert torch.equal(keep_null_windows(features, null, 0.25, seed=3)["start_positions"], rows)
    assert keep_null_windows(features, null, 1.0, seed=3)["start_positions"].tolist() == list(range(2000))


def test_null_windows_are_read_from_the_labels():
    span = {
        "input_ids": torch.tensor([[101, 5, 6, 102], [7, 101, 5, 102], [101, 5, 6, 102]]),
        "start_positions": torch.tensor([0, 1, 2]),
    }
    assert span_null_windows(span, cls_token_id=101).tolist() == [True, True, False]
    labels = torch.tensor([[102, -100, -100], [7, 8, 102]])
    assert seq2seq_null_windows({"labels": labels}, end_token=102).tolist() == [True, False]


class FixedPredictor:
    """A predictor whose best non-empty answers and null odds are given."""

    def __init__(self, examples, answers, null_odds):
        self.examples, self.answers, self.null_odds = examples, answers, null_odds

    def predict(self, model):
        return QAPredictions({q: "" for q in self.answers}, self.null_odds, self.answers)


def _case(seed: int):
    rng = random.Random(seed)
    examples, answers, odds = [], {}, {}
    for n in range(60):
        gold = rng.choice(["", "red fox", "blue sky"])
        examples.append(SimpleNamespace(id=str(n), answers=[gold] if gold else [], question="q", context="c"))
        answers[str(n)] = rng.choice(["red fox", "blue sky", "red"])
        odds[str(n)] = rng.gauss(-1.0 if gold else 1.0, 1.5)
    return examples, answers, odds


def _f1(examples, answers, odds, answered) -> float:
    return squad_v2_evaluate(examples, {q: a if answered(odds[q]) else "" for q, a in answers.items()})["f1"]


@pytest.mark.parametrize("seed", range(4))
def test_calibrated_threshold_reaches_the_best_f1_of_any_threshold(seed):
    examples, answers, odds = _case(seed)
    best = max(_f1(examples, answers, odds, lambda o, t=t: o <= t) for t in [-math.inf, *odds.values()])
    span = calibrate_null_threshold(FixedPredictor(examples, answers, odds), "span", None)
    assert _f1(examples, answers, odds, lambda o: not o > span) == pytest.approx(best)  # run_qa.py: "" if odds > t
    seq2seq = calibrate_null_threshold(FixedPredictor(examples, answers, odds), "seq2seq", None)
    assert _f1(examples, answers, odds, lambda o: -o > seq2seq) == pytest.approx(best)  # answer if -odds > t


def test_calibration_answers_nothing_when_nothing_beats_it():
    examples, answers, odds = _case(0)
    wrong = {q: "zzz" for q in answers}
    span = calibrate_null_threshold(FixedPredictor(examples, wrong, odds), "span", None)
    seq2seq = calibrate_null_threshold(FixedPredictor(examples, wrong, odds), "seq2seq", None)
    assert all(o > span for o in odds.values()) and not any(-o > seq2seq for o in odds.values())
