"""`posformer qa`: --resume continues a run, --num-beams uses beam search, --dataset-name goes through `datasets`."""

from __future__ import annotations

import json
import sys
import types

from posformer.cli import main
from posformer.data.squad import load_squad_json, squad_sample

TINY_T5 = ["--from-scratch", "--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "64", "--vocab-size", "400"]
WINDOWS = ["--max-seq-length", "96", "--doc-stride", "32"]
SAMPLES = ["--max-train-samples", "24", "--max-eval-samples", "6"]


def _steps(run) -> list[int]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if "loss" in json.loads(line)]


def test_resume_continues_from_the_last_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    base = ["qa", "train", "--output-dir", str(run), "--no-progress", "--save-steps", "2", *TINY_T5, *WINDOWS, *SAMPLES]
    assert main([*base, "--max-steps", "4"]) == 0
    assert _steps(run) == [1, 2, 3, 4]
    capsys.readouterr()
    assert main([*base, "--max-steps", "6", "--resume"]) == 0
    assert _steps(run) == [1, 2, 3, 4, 5, 6]  # steps 1-4 are not trained again
    assert (run / "checkpoints" / "step-00000006" / "model.safetensors").is_file()
    assert json.loads((run / "eval_results.json").read_text())["total"] == 6


def test_num_beams_changes_the_search_not_the_outputs(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            ["qa", "train", "--output-dir", str(run), "--no-progress", "--max-steps", "3", *TINY_T5, *WINDOWS, *SAMPLES]
        )
        == 0
    )
    for beams in ("1", "3"):
        out = tmp_path / f"beams{beams}"
        assert (
            main(
                [
                    "qa",
                    "eval",
                    "--model",
                    str(run),
                    "--num-beams",
                    beams,
                    "--max-eval-samples",
                    "6",
                    "--output-dir",
                    str(out),
                ]
            )
            == 0
        )
        predictions = json.loads((out / "predictions.json").read_text())
        assert len(predictions) == 6
        assert json.loads((out / "eval_results.json").read_text())["num_beams"] == int(beams)


def test_dataset_name_reads_the_datasets_library(tmp_path, monkeypatch, capsys):
    """A stand-in `datasets` module serves the shipped sample as the hub's train/validation splits."""
    records = {}
    for split, first, count in (("train", 0, 24), ("validation", 600, 6)):
        examples = load_squad_json(squad_sample(), for_training=False).examples[first : first + count]
        records[split] = [
            {
                "id": ex.id,
                "title": ex.title,
                "context": ex.context,
                "question": ex.question,
                "answers": {"text": list(ex.answers), "answer_start": list(ex.answer_starts)},
            }
            for ex in examples
        ]
    calls = []

    def load_dataset(name, config_name=None, split=None):
        calls.append((name, config_name, split))
        return records[split]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    run = tmp_path / "run"
    assert (
        main(
            [
                "qa",
                "train",
                "--dataset-name",
                "squad_v2",
                "--output-dir",
                str(run),
                "--no-progress",
                "--max-steps",
                "2",
                *TINY_T5,
                *WINDOWS,
            ]
        )
        == 0
    )
    assert ("squad_v2", None, "train") in calls and ("squad_v2", None, "validation") in calls
    predictions = json.loads((run / "predictions.json").read_text())
    assert set(predictions) == {r["id"] for r in records["validation"]}
