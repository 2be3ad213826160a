"""`posformer qa score`: the official report for any predictions file, with clear errors."""

from __future__ import annotations

import json

from posformer.cli import main
from posformer.data.squad import load_squad_json, squad_sample
from squad_oracle import assert_same, hf_evaluate


def _predictions(tmp_path):
    """Every third question unanswered, the others answered with their first gold text."""
    examples = load_squad_json(squad_sample(), for_training=False).examples
    preds = {ex.id: ("" if i % 3 == 0 or not ex.answers else ex.answers[0]) for i, ex in enumerate(examples)}
    na = {ex.id: (i % 7) / 7 for i, ex in enumerate(examples)}
    (tmp_path / "pred.json").write_text(json.dumps(preds))
    (tmp_path / "na.json").write_text(json.dumps(na))
    return examples, preds, na


def test_qa_score_prints_the_official_report(tmp_path, capsys):
    """The report of the official script (transformers' implementation of it), key for key."""
    examples, preds, na = _predictions(tmp_path)
    gold = {ex.id: ex.answers for ex in examples}
    args = ["qa", "score", "--eval-file", str(squad_sample()), "--predictions", str(tmp_path / "pred.json")]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert_same(printed, hf_evaluate(gold, preds, None))
    assert list(printed)[:3] == ["exact", "f1", "total"] and printed["total"] == len(examples)
    assert main([*args, "--na-probs", str(tmp_path / "na.json"), "--out-file", str(tmp_path / "eval.json")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert_same(printed, hf_evaluate(gold, preds, na))
    assert printed == json.loads((tmp_path / "eval.json").read_text())
    assert {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} <= set(printed)


def test_qa_score_errors_name_the_file(tmp_path, capsys):
    _predictions(tmp_path)
    assert (
        main(["qa", "score", "--eval-file", str(tmp_path / "nope.json"), "--predictions", str(tmp_path / "pred.json")])
        == 2
    )
    assert "nope.json" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert main(["qa", "score", "--eval-file", str(squad_sample()), "--predictions", str(tmp_path / "bad.json")]) == 2
    assert "bad.json" in capsys.readouterr().err
