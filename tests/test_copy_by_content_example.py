"""examples/copy_by_content.py, the probe of docs/longeval.md's Learnability table: a short run prints its copy
accuracy, and a segment that cannot fit is refused with the flag's name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "copy_by_content.py"


def run_example(monkeypatch, *args: str) -> None:
    spec = importlib.util.spec_from_file_location("copy_by_content", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["copy_by_content.py", *args])
    module.main()


def test_a_short_run_prints_its_copy_accuracy(capsys, monkeypatch) -> None:
    run_example(monkeypatch, "--key-smear", "--steps", "50", "--length", "32", "--segment", "4,8", "--vocab-size", "64")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("step 50 ") and 0.0 <= float(line.split("copy ")[1]) <= 1.0


def test_a_segment_longer_than_half_the_row_is_refused(capsys, monkeypatch) -> None:
    with pytest.raises(SystemExit):
        run_example(monkeypatch, "--length", "32", "--segment", "4,20")
    assert "--segment 4,20: expected 1 <= shortest <= longest <= --length / 2" in capsys.readouterr().err


def test_packed_rows_print_the_accuracy_on_long_rows_too(capsys, monkeypatch) -> None:
    run_example(monkeypatch, "--key-smear", "--steps", "50", "--length", "64", "--span", "32", "--vocab-size", "64")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert " copy " in line and 0.0 <= float(line.split("long ")[1]) <= 1.0


def test_a_span_under_16_tokens_is_refused(capsys, monkeypatch) -> None:
    with pytest.raises(SystemExit):
        run_example(monkeypatch, "--span", "8", "--length", "64")
    assert "--span 8: expected 16 <= span <= --length" in capsys.readouterr().err
