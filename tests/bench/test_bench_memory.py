"""`posformer bench --memory`: one process per cell, a table per phase, the figure and the JSON."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from posformer.bench.memory import MemoryOptions, _probe, format_report, run  # noqa: E402
from posformer.cli import main  # noqa: E402

TINY_SHAPE = dict(d_model=16, layers=1, heads=2, d_ff=32, vocab=32)
TINY = dict(**TINY_SHAPE, threads=1, progress=False)


def test_every_cell_is_measured_in_its_own_process_beside_none_and_the_hf_peer(tmp_path, capsys) -> None:
    out = tmp_path / "memory.json"
    argv = ["bench", "--memory", "--encodings", "t5", "--lengths", "32", "--phases", "forward", "--json", str(out)]
    argv += ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32", "--vocab", "32", "--threads", "1"]
    assert main([*argv, "--plot", str(tmp_path / "memory.png"), "--no-progress"]) == 0
    result = json.loads(out.read_text())
    measured = {(c["model"], c["encoding"], c["length"]) for c in result["cells"] if c["peak_mb"] >= 0}
    assert measured == {("posformer", "none", 32), ("posformer", "t5", 32), ("hf", "t5", 32)}
    report = capsys.readouterr().out
    assert "| forward | T = 32 | x none at 32 |" in report and "| HF t5 |" in report
    assert (tmp_path / "memory.png").stat().st_size > 0


def test_a_cell_that_fails_reads_so_and_the_others_stand() -> None:
    spec = dict(model="hf", encoding="kerple", phase="forward", length=16, shape=dict(TINY_SHAPE), batch=1)
    cell = _probe({**spec, "device": "cpu", "threads": 1}, timeout=120, release_freed=True)
    assert cell["error"].startswith("exit 1:") and "kerple" in cell["error"]
    result = run(MemoryOptions(**TINY, encodings=["alibi"], lengths=[16], phases=["train"], peers=False))
    assert [c["encoding"] for c in result["cells"]] == ["none", "alibi"]
    assert "| alibi | " in format_report(result)


def test_the_json_holds_each_cell_as_soon_as_it_is_measured(tmp_path, monkeypatch) -> None:
    """A long run stopped midway keeps what it measured: after each cell the JSON holds the cells so far."""
    out = tmp_path / "memory.json"
    seen = []

    def probe(spec, timeout, release_freed=False):
        seen.append(len(json.loads(out.read_text())["cells"]) if out.exists() else 0)
        return {"peak_mb": float(spec["length"]), "seconds": 0.0}

    monkeypatch.setattr("posformer.bench.memory._probe", probe)
    run(MemoryOptions(**TINY, encodings=["alibi"], lengths=[16, 32], phases=["forward"], peers=False, json=str(out)))
    assert seen == [0, 1, 2, 3]
    written = json.loads(out.read_text())
    assert [c["peak_mb"] for c in written["cells"]] == [16.0, 32.0, 16.0, 32.0] and written["unfinished"] == 0


def test_whole_bias_rows_measure_each_encoding_with_a_bias_in_one_piece(monkeypatch) -> None:
    """--whole-bias adds a 'whole' cell for every encoding that has a bias (alibi, not rope), and the report gives
    each cell's seconds beside its memory."""
    specs = []

    def probe(spec, timeout, release_freed=False):
        specs.append(spec)
        return {"peak_mb": 10.0, "seconds": 2.0 if spec["model"] == "whole" else 1.0}

    monkeypatch.setattr("posformer.bench.memory._probe", probe)
    options = dict(encodings=["alibi", "rope"], lengths=[16], phases=["forward"], peers=False, whole_bias=True)
    result = run(MemoryOptions(**TINY, **options))
    assert [(s["model"], s["encoding"]) for s in specs] == [
        ("posformer", "none"), ("posformer", "alibi"), ("posformer", "rope"), ("whole", "alibi"),
    ]  # fmt: skip
    report = format_report(result)
    assert "| alibi whole | 10 MB | 1.00 |" in report and "| alibi whole | 2.0 | 2.00 |" in report
