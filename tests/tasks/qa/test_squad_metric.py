"""The SQuAD v2.0 metric: hand-worked values, properties, and equality with the transformers implementation."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posformer.data.squad import load_squad_json, squad_sample
from posformer.tasks.qa.squad_metric import (
    exact_score,
    f1_score,
    normalize_answer,
    read_json_mapping,
    squad_v2_evaluate,
    write_predictions,
)
from shared_data import squad_dev_file
from squad_oracle import assert_same, hf_evaluate


def test_normalize_answer_by_hand():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theater Anne's") == "theater annes"
    assert normalize_answer("U.S.A.") == "usa"
    assert normalize_answer("the-end") == "theend"
    assert normalize_answer("  A\tthe\nAN ") == ""
    assert normalize_answer("café—bar") == "café—bar"


def test_f1_and_exact_by_hand():
    # gold tokens [cat, sat, on, mat], prediction [cat, on, mat]: overlap 3, P = 1, R = 3/4, F1 = 6/7
    assert f1_score("the cat sat on the mat", "cat on mat") == pytest.approx(6 / 7)
    # gold [x, y, y], prediction [y, y, y, z]: overlap 2 (y counted twice), P = 2/4, R = 2/3, F1 = 4/7
    assert f1_score("x y y", "y y y z") == pytest.approx(4 / 7)
    assert f1_score("cat", "dog") == 0.0
    assert f1_score("", "") == 1.0 and f1_score("the", "") == 1.0 and f1_score("cat", "") == 0.0
    assert exact_score("The Denver Broncos", "denver broncos!") == 1 and exact_score("cat", "cats") == 0


CRAFTED_GOLD = {
    "q1": ["Denver Broncos", "the Denver Broncos"],
    "q2": ["Santa Clara, California"],
    "q3": [],
    "q4": [],
    "q5": ["1990"],
}
CRAFTED_PREDS = {"q1": "denver broncos!", "q2": "Santa Clara", "q3": "", "q4": "x"}


def test_crafted_set_by_hand():
    # per question (exact, f1): q1 (1, 1); q2 (0, 0.8: P = 2/2, R = 2/3); q3 (1, 1); q4 (0, 0); q5 missing (0, 0)
    report = squad_v2_evaluate(CRAFTED_GOLD, CRAFTED_PREDS)
    expected = {
        "exact": 40.0,
        "f1": 56.0,
        "total": 5,  # 2/5 and 2.8/5
        "HasAns_exact": 100 / 3,
        "HasAns_f1": 60.0,
        "HasAns_total": 3,  # 1/3 and 1.8/3
        "NoAns_exact": 50.0,
        "NoAns_f1": 50.0,
        "NoAns_total": 2,
    }
    assert_same(report, expected)


def test_crafted_set_with_no_answer_probabilities_by_hand():
    probs = {"q1": 0.1, "q2": 0.9, "q3": 0.8, "q4": 0.95}
    report = squad_v2_evaluate(CRAFTED_GOLD, CRAFTED_PREDS, probs, na_prob_thresh=0.85)
    # q2 (0.9) and q4 (0.95) exceed 0.85: q2 is answerable -> 0, q4 unanswerable -> 1
    # exact = f1 = (1 + 0 + 1 + 1 + 0) / 5; HasAns 1/3; NoAns 2/2
    # best: start at 2 (q3, q4 as no-answer); q1 +1 -> 3 @0.1; q3 +0; q2 +0.8 (f1) / +0 (exact); q4 -1
    # best_f1 = 3.8/5 at 0.9, best_exact = 3/5 at 0.1
    expected = {
        "exact": 60.0,
        "f1": 60.0,
        "total": 5,
        "HasAns_exact": 100 / 3,
        "HasAns_f1": 100 / 3,
        "HasAns_total": 3,
        "NoAns_exact": 100.0,
        "NoAns_f1": 100.0,
        "NoAns_total": 2,
        "best_exact": 60.0,
        "best_exact_thresh": 0.1,
        "best_f1": 76.0,
        "best_f1_thresh": 0.9,
    }
    assert_same(report, expected)


def test_crafted_set_equals_transformers_when_nothing_is_missing():
    gold = {q: a for q, a in CRAFTED_GOLD.items() if q != "q5"}
    probs = {"q1": 0.1, "q2": 0.9, "q3": 0.8, "q4": 0.95}
    assert_same(squad_v2_evaluate(gold, CRAFTED_PREDS), hf_evaluate(gold, CRAFTED_PREDS, None))
    assert_same(squad_v2_evaluate(gold, CRAFTED_PREDS, probs, 0.85), hf_evaluate(gold, CRAFTED_PREDS, probs, 0.85))


def synthetic_predictions(examples, seed: int) -> tuple[dict[str, str], dict[str, float]]:
    """Gold, gold with articles/case/punctuation noise, partial gold, context spans and empty strings.

    No-answer probabilities are rounded to 2 decimals (many ties) and lower for the good predictions,
    so the best thresholds are not trivial.
    """
    rng = random.Random(seed)
    preds: dict[str, str] = {}
    probs: dict[str, float] = {}
    for ex in examples:
        kind = rng.randrange(6)
        words = ex.context.split()
        if kind == 0 and ex.answers:
            preds[ex.id] = rng.choice(ex.answers)
        elif kind == 1 and ex.answers:
            preds[ex.id] = rng.choice(["An ", "the ", "A "]) + rng.choice(ex.answers).upper() + rng.choice(".!,")
        elif kind == 2 and ex.answers:
            gold = rng.choice(ex.answers).split()
            preds[ex.id] = " ".join(gold[1:] + [rng.choice(words)])
        elif kind in (3, 4):
            i = rng.randrange(len(words))
            preds[ex.id] = " ".join(words[i : i + rng.randint(1, 6)])
        else:
            preds[ex.id] = ""
        probs[ex.id] = round(rng.random() * (0.6 if kind < 2 else 1.0), 2)
    return preds, probs


def test_real_dev_equals_transformers():
    examples = load_squad_json(squad_dev_file(), for_training=False).examples
    gold = {ex.id: ex.answers for ex in examples}
    preds, probs = synthetic_predictions(examples, seed=0)
    assert_same(squad_v2_evaluate(examples, preds, probs), hf_evaluate(gold, preds, probs))
    assert_same(squad_v2_evaluate(gold, preds), hf_evaluate(gold, preds, None))
    empty = {q: "" for q in gold}
    report = squad_v2_evaluate(gold, empty)
    assert report["exact"] == report["f1"] == pytest.approx(100 * 5945 / 11873)
    assert round(report["f1"], 2) == 50.07


@pytest.mark.parametrize("seed, thresh", [(1, 0.5), (2, 0.0), (3, 1.0)])
def test_sample_equals_transformers(seed, thresh):
    examples = load_squad_json(squad_sample(), for_training=False).examples
    gold = {ex.id: ex.answers for ex in examples}
    preds, probs = synthetic_predictions(examples, seed)
    assert_same(squad_v2_evaluate(gold, preds, probs, thresh), hf_evaluate(gold, preds, probs, thresh))


def test_perfect_predictions_score_100():
    examples = load_squad_json(squad_sample(), for_training=False).examples
    preds = {ex.id: (ex.answers[-1] if ex.answers else "") for ex in examples}
    report = squad_v2_evaluate(examples, preds, {q: 0.0 for q in preds})
    assert all(report[k] == 100.0 for k in report if not k.endswith(("total", "thresh")))


words = st.lists(st.sampled_from(["a", "the", "cat", "Cat", "mat,", "on", "x!", "y", "é"]), max_size=6).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(gold=words, pred=words)
def test_score_properties(gold, pred):
    f1 = f1_score(gold, pred)
    assert 0.0 <= f1 <= 1.0 and exact_score(gold, pred) <= f1
    assert f1 == pytest.approx(f1_score(pred, gold))
    assert f1_score(gold, gold) == 1.0


@settings(max_examples=50, deadline=None)
@given(golds=st.lists(st.lists(words, max_size=3), min_size=1, max_size=6), data=st.data())
def test_report_properties(golds, data):
    gold = {f"q{i}": g for i, g in enumerate(golds)}
    preds = {q: data.draw(words) for q in gold}
    report = squad_v2_evaluate(gold, preds)
    assert 0.0 <= report["exact"] <= report["f1"] <= 100.0 and report["total"] == len(gold)


def test_missing_no_answer_probability_is_an_error():
    with pytest.raises(ValueError, match="missing for 1 predicted question"):
        squad_v2_evaluate(CRAFTED_GOLD, CRAFTED_PREDS, {"q1": 0.1, "q2": 0.9, "q3": 0.8})


def test_write_predictions_official_formats(tmp_path):
    preds = {"a": "Zürich", "b": ""}
    paths = write_predictions(tmp_path / "out", preds, {"a": 0.25, "b": 1})
    assert json.loads(paths["predictions"].read_text(encoding="utf-8")) == preds
    assert json.loads(paths["null_odds"].read_text()) == {"a": 0.25, "b": 1.0}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["null_odds.json", "predictions.json"]
    assert read_json_mapping(paths["predictions"], "predictions") == preds
    assert list(write_predictions(tmp_path / "only", preds)) == ["predictions"]
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match="list.json must hold a JSON object"):
        read_json_mapping(tmp_path / "list.json", "predictions")
