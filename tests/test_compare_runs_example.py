"""examples/compare_runs.py, the mix's price in docs/longeval.md: the ratio of two runs' perplexities with its paired
interval, from their results.json; runs scored on different blocks, or a directory without results, are refused."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "compare_runs.py"


def run_example(monkeypatch, *args: Path) -> None:
    spec = importlib.util.spec_from_file_location("compare_runs", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["compare_runs.py", *map(str, args)])
    module.main()


def write_run(directory: Path, nll: list[float], count: list[int]) -> Path:
    directory.mkdir()
    ppl = math.exp(sum(nll) / sum(count))
    row = {"ppl": {"books": {"64": ppl}}, "blocks": {"books": {"64": {"nll": nll, "count": count}}}}
    (directory / "results.json").write_text(json.dumps({"rows": {"rope": row}}))
    return directory


def test_the_ratio_is_the_perplexities_ratio_inside_its_interval(tmp_path, capsys, monkeypatch) -> None:
    a = write_run(tmp_path / "a", [130.0, 125.0, 140.0, 128.0], [63, 63, 63, 63])
    b = write_run(tmp_path / "b", [120.0, 118.0, 126.0, 121.0], [63, 63, 63, 63])
    run_example(monkeypatch, a, b)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    ratio, low, high = (
        float(x) for x in line.split(":")[1].replace("[", " ").replace("]", " ").replace(",", " ").split()
    )
    assert ratio == pytest.approx(math.exp((523 - 485) / 252), abs=5e-4)
    assert low <= ratio <= high and low > 1  # a reads every block worse than b


def test_runs_scored_on_different_blocks_are_refused(tmp_path, monkeypatch) -> None:
    a = write_run(tmp_path / "a", [130.0, 125.0], [63, 63])
    b = write_run(tmp_path / "b", [120.0, 118.0], [63, 62])
    with pytest.raises(SystemExit, match="scored different blocks"):
        run_example(monkeypatch, a, b)
    with pytest.raises(SystemExit, match="results.json not found"):
        run_example(monkeypatch, a, tmp_path)
