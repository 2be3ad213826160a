"""`posformer qa train` / `qa eval` end to end: tiny seq2seq and span runs, output files, help and errors."""

from __future__ import annotations

import json

import pytest
from squad_oracle import hf_evaluate
from tiny_qa import tiny_bert

from posformer.cli import main
from posformer.data.squad import load_squad_json, split_by_article, squad_sample
from posformer.tasks.qa_evaluation import NULL_ODDS_CLIP
from posformer.tasks.qa_job import EVAL_FRACTION, SPLIT_SEED

TINY_T5 = ["--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "64", "--vocab-size", "400"]
WINDOWS = ["--max-seq-length", "96", "--doc-stride", "32"]
SAMPLES = ["--max-train-samples", "24", "--max-eval-samples", "12"]
SEED_FLAGS = ["--model", "--model-name-or-path", "--dataset-name", "--train-file", "--eval-file", "--context-column",
              "--question-column", "--answer-column", "--per-device-train-batch-size", "--learning-rate",
              "--num-train-epochs", "--max-seq-length", "--doc-stride", "--output-dir", "--max-answer-length",
              "--num-beams", "--head", "--null-score-diff-threshold"]


def _printed_report(out: str) -> dict:
    return json.loads(out[out.rindex('{\n  "exact"'):])


def _eval_examples(count: int) -> list:
    examples = load_squad_json(squad_sample(), for_training=False).examples
    return split_by_article(examples, eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED)[1][:count]


def _check_outputs(directory, printed: dict, count: int) -> None:
    """The printed report is the official report (transformers' implementation of the official script) of
    the written files, and eval_results.json holds it: exact/f1 of predictions.json as it stands, best_* of
    answers.json under the best threshold over null_odds.json. Every non-empty prediction is its question's
    best answer."""
    predictions = json.loads((directory / "predictions.json").read_text())
    answers = json.loads((directory / "answers.json").read_text())
    null_odds = json.loads((directory / "null_odds.json").read_text())
    assert set(predictions) == set(null_odds) == set(answers) and len(predictions) == count
    assert all(abs(v) <= NULL_ODDS_CLIP for v in null_odds.values())
    assert all(answers[k] == v for k, v in predictions.items() if v)
    gold = {ex.id: ex.answers for ex in _eval_examples(count)}
    expected = hf_evaluate(gold, predictions, None)
    thresholded = hf_evaluate(gold, answers, null_odds, thresh=float("inf"))
    expected.update({k: v for k, v in thresholded.items() if k.startswith("best_")})
    assert printed == pytest.approx(expected)
    stored = json.loads((directory / "eval_results.json").read_text())
    assert {k: stored[k] for k in expected} == pytest.approx(expected)
    assert {"exact", "f1", "HasAns_exact", "NoAns_exact", "best_f1", "best_f1_thresh"} <= set(printed)


def test_seq2seq_train_then_eval(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["qa", "train", "--output-dir", str(run), "--max-steps", "4", "--no-progress", *TINY_T5, *WINDOWS,
            *SAMPLES]
    assert main(args) == 0
    _check_outputs(run, _printed_report(capsys.readouterr().out), 12)
    for name in ("metrics.jsonl", "loss.png", "run_config.yaml"):
        assert (run / name).is_file()
    checkpoint = run / "checkpoints" / "step-00000004"
    assert (checkpoint / "tokenizer.json").is_file() and (checkpoint / "model.safetensors").is_file()
    assert main(args) == 2  # the run dir holds checkpoints: --resume or another dir
    assert "--resume" in capsys.readouterr().err

    out = tmp_path / "eval"
    assert main(["qa", "eval", "--model", str(run), "--max-eval-samples", "12", "--output-dir", str(out)]) == 0
    printed = _printed_report(capsys.readouterr().out)
    _check_outputs(out, printed, 12)
    assert json.loads((run / "predictions.json").read_text()) == json.loads((out / "predictions.json").read_text())

    assert main(["qa", "eval", "--model", str(run), "--head", "span", "--max-eval-samples", "2"]) == 2
    assert "--head span needs a BERT-family" in capsys.readouterr().err


def test_span_train_then_eval_and_head_mismatch(tmp_path, capsys):
    bert = tmp_path / "bert"
    tiny_bert(bert)
    run = tmp_path / "span"
    args = ["qa", "train", "--head", "span", "--model", str(bert), "--output-dir", str(run), "--max-steps", "3",
            "--learning-rate", "1e-3", "--no-progress", *WINDOWS, *SAMPLES]
    assert main(args) == 0
    _check_outputs(run, _printed_report(capsys.readouterr().out), 12)
    assert main(["qa", "eval", "--model", str(run), "--max-eval-samples", "12"]) == 0
    _check_outputs(run, _printed_report(capsys.readouterr().out), 12)
    assert json.loads((run / "eval_results.json").read_text())["head"] == "span"

    assert main(["qa", "train", "--model", str(bert), "--output-dir", str(tmp_path / "x"), *WINDOWS]) == 2
    assert "--head seq2seq needs a T5-style" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "eval"])
def test_help_lists_the_seed_flags(command, capsys):
    with pytest.raises(SystemExit):
        main(["qa", command, "--help"])
    text = capsys.readouterr().out
    wanted = [f for f in SEED_FLAGS if command == "train" or f not in ("--train-file", "--per-device-train-batch-size",
                                                                         "--learning-rate", "--num-train-epochs")]
    missing = [flag for flag in wanted if flag not in text]
    assert not missing
    if command == "train":
        assert "CPU-friendly defaults" in text and "batch 12" in text


def test_bad_inputs_fail_clearly(tmp_path, capsys):
    out = ["--output-dir", str(tmp_path / "run"), *TINY_T5, "--max-steps", "1"]
    assert main(["qa", "train", "--train-file", str(tmp_path / "missing.json"), *out]) == 2
    assert "missing.json" in capsys.readouterr().err
    records = tmp_path / "rows.jsonl"
    records.write_text(json.dumps({"id": "a", "passage": "x y", "question": "q?", "answers": {"text": [],
                                                                                             "answer_start": []}}))
    assert main(["qa", "train", "--train-file", str(records), *out]) == 2
    assert "context" in capsys.readouterr().err
    assert main(["qa", "train", "--eval-file", str(squad_sample()), *out]) == 2
    assert "--train-file" in capsys.readouterr().err
    assert main(["qa", "eval", "--model", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["qa", "train", "--doc-stride", "200", "--max-seq-length", "100", *out]) == 2
    assert "--doc-stride" in capsys.readouterr().err
    assert main(["qa", "train", "--doc-stride", "0", *out]) == 2
    assert "--doc-stride=0 is invalid: expected a positive integer" in capsys.readouterr().err
    assert main(["qa", "train", "--learning-rate", "-1", *out]) == 2
    assert "--learning-rate=-1.0 is invalid: expected a number > 0" in capsys.readouterr().err
    assert main(["qa", "train", *out, "--d-model", "30", "--heads", "4"]) == 2
    assert "--d-model=30 is invalid: expected a multiple of --heads (4)" in capsys.readouterr().err
