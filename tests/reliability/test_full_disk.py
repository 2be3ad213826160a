"""A full disk leaves nothing behind: the write test of an output dir removes its probe file even when the write
fails (a full disk creates the file, then refuses its bytes), and an evaluation's files (predictions.json,
null_odds.json, answers.json, eval_results.json) are written as one set, all new or all as they were, so a failed
evaluation never leaves some of its files to mix with an earlier one's."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from checkpoint_fixtures import refused

from posformer.tasks.qa.evaluation import QAEvaluator
from posformer.train.run_lock import check_output_dir
from posformer.utils import safe_write as atomic
from posformer.utils.safe_write import write_json_set_atomic

OUTPUTS = ("predictions.json", "null_odds.json", "answers.json", "eval_results.json")


def disk_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def full_disk_probe(monkeypatch):
    """Writing a `.write-test-*` file creates it empty, then fails as a full disk does."""
    real = atomic._fill

    def fill(fd: int, data: bytes) -> None:
        if data is atomic.PROBE:
            os.close(fd)
            raise disk_full()
        real(fd, data)

    monkeypatch.setattr(atomic, "_fill", fill)


def test_the_write_test_removes_its_probe_when_the_write_fails(tmp_path: Path, full_disk_probe) -> None:
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=f"output dir {out} is not writable: No space left on device"):
        check_output_dir(out)
    assert list(out.iterdir()) == []


def test_a_command_on_a_full_disk_leaves_no_probe(tmp_path: Path, full_disk_probe) -> None:
    out = tmp_path / "out"
    assert "is not writable: No space left on device" in refused("extrapolate", "--output-dir", str(out))
    assert not [p for p in out.iterdir() if p.name.startswith(".write-test")]


def test_the_write_test_still_names_a_path_it_cannot_create(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=f"output dir {blocker / 'out'} is not writable"):
        check_output_dir(blocker / "out")


@pytest.fixture
def failing_write(monkeypatch):
    """`fail_at(k)`: the k-th temporary file of a set (from 0) cannot be written, as on a full disk."""
    real = atomic._temporary

    def fail_at(k: int) -> None:
        calls = iter(range(1_000))

        def temporary(path: Path, text: str) -> Path:
            if next(calls) == k:
                raise disk_full()
            return real(path, text)

        monkeypatch.setattr(atomic, "_temporary", temporary)

    return fail_at


def evaluator(run: str) -> QAEvaluator:
    qa = QAEvaluator(SimpleNamespace(examples=[], logits_dtype="float32"))
    qa.predictions, qa.answers, qa.null_odds = {"q1": run}, {"q1": run}, {"q1": 1.5}
    qa.report = {"exact": 50.0, "run": run}
    return qa


def contents(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


@pytest.mark.parametrize("k", range(len(OUTPUTS)))
def test_a_failed_evaluation_leaves_the_earlier_one_whole(tmp_path: Path, failing_write, k: int) -> None:
    out = tmp_path / "eval"
    evaluator("old").write(out, {"head": "span"})
    before = contents(out)
    failing_write(k)
    with pytest.raises(OSError, match="No space left"):
        evaluator("new").write(out, {"head": "span"})
    assert contents(out) == before  # no new file, no temporary file


@pytest.mark.parametrize("k", range(len(OUTPUTS)))
def test_a_failed_first_evaluation_leaves_no_file(tmp_path: Path, failing_write, k: int) -> None:
    (tmp_path / "eval").mkdir()
    failing_write(k)
    with pytest.raises(OSError):
        evaluator("new").write(tmp_path / "eval", {})
    assert list((tmp_path / "eval").iterdir()) == []


def test_an_evaluation_writes_its_four_files(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    evaluator("old").write(out, {})
    results = evaluator("new").write(out, {"head": "span"})
    assert sorted(contents(out)) == sorted(OUTPUTS)
    assert json.loads((out / "predictions.json").read_text()) == {"q1": "new"}
    assert json.loads((out / "null_odds.json").read_text()) == {"q1": 1.5}
    assert (
        json.loads((out / "eval_results.json").read_text())
        == results
        == {"exact": 50.0, "run": "new", "logits_dtype": "float32", "head": "span"}
    )


def test_write_json_set_atomic_replaces_all_or_none(tmp_path: Path, failing_write) -> None:
    files = {"a.json": [1], "b.json": {"x": "é"}}
    assert write_json_set_atomic(tmp_path, files) == [tmp_path / "a.json", tmp_path / "b.json"]
    assert (tmp_path / "b.json").read_text(encoding="utf-8") == '{\n  "x": "é"\n}\n'
    failing_write(1)
    with pytest.raises(OSError):
        write_json_set_atomic(tmp_path, {"a.json": [2], "b.json": [2]})
    assert json.loads((tmp_path / "a.json").read_text()) == [1] and sorted(contents(tmp_path)) == ["a.json", "b.json"]
