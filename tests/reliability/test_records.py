"""Records that must not lie or get lost: the metrics log on resume, and files a run cannot write.

A garbage line in metrics.jsonl is skipped with a warning naming the file and line; every valid
record up to the resumed step is kept. A checkpoint, log or run config that cannot be written stops
the run with one message naming the path (exit 2, no traceback), the previous checkpoint intact.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors import SafetensorError

from posformer.cli import main
from posformer.train import metrics_log, training_checkpoint
from posformer.train.metrics_log import MetricsLog
from posformer.train.training_checkpoint import verify
from train_helpers import finished_run, losses

STEPS = 20  # checkpoints at 10 and 20


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config file, run dir) of a finished 20-step run."""
    return finished_run(tmp_path_factory.mktemp("records"), STEPS)


def _train(config: Path, out: Path, *extra: str) -> int:
    return main(["train", "--config", str(config), "--output-dir", str(out), "--no-progress", *extra])


def test_a_garbage_line_mid_log_is_skipped_with_a_warning_not_a_truncation(
    finished: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    config, run = finished
    out = shutil.copytree(run, tmp_path / "run")
    lines = (out / "metrics.jsonl").read_text().splitlines()
    valid = [json.loads(line) for line in lines]
    lines.insert(3, "{not json")
    lines.insert(8, "\x00\x01 binary junk")
    (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert _train(config, out, "--resume", "--set", f"trainer.steps={STEPS + 5}") == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert f"{out / 'metrics.jsonl'}, line 4" in text and f"{out / 'metrics.jsonl'}, line 9" in text
    kept = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert kept[: len(valid)] == valid  # every record up to the resumed step (20) is still there
    assert [s for s, _ in losses(out)] == list(range(1, STEPS + 6))


def test_records_keeps_every_valid_line_around_garbage(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(
        b'{"step": 1, "loss": 2.0}\n[1, 2]\n\xff\xfe\n{"step": "x"}\n\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo'
    )
    warnings: list[str] = []
    log = MetricsLog(path, warn=warnings.append)
    assert [r["step"] for r in log.records()] == [1, 2]
    assert [w.split(",")[1].split(":")[0].strip() for w in warnings] == ["line 2", "line 3", "line 4", "line 7"]
    log.truncate_after(1)
    assert path.read_text() == '{"step": 1, "loss": 2.0}\n'


@pytest.mark.parametrize(
    "error, reason",
    [
        (lambda path: PermissionError(13, "Permission denied", path), "Permission denied"),
        (
            lambda path: SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
            "No space left on device",
        ),
    ],
)
def test_a_checkpoint_write_that_fails_names_the_path_and_keeps_the_previous_one(
    tmp_path: Path,
    finished: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    error,
    reason: str,
) -> None:
    config, _ = finished
    real, calls = training_checkpoint.save_model, []

    def denied_on_the_second(model, path: str) -> None:
        calls.append(path)
        if len(calls) == 2:
            Path(path).write_bytes(b"half a checkpoint")
            raise error(path)
        real(model, path)

    monkeypatch.setattr(training_checkpoint, "save_model", denied_on_the_second)
    out = tmp_path / "run"
    assert _train(config, out) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "could not write checkpoint" in err and str(out / "checkpoints" / "step-00000020") in err
    assert reason in err and str(out / "checkpoints" / "step-00000010") in err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000010"]  # no half-written one
    verify(out / "checkpoints" / "step-00000010")


@pytest.mark.parametrize("name, what", [("metrics.jsonl", "the metrics log"), ("run_config.yaml", "the run config")])
def test_a_run_file_that_cannot_be_written_is_a_clean_error(
    tmp_path: Path, finished: tuple[Path, Path], capsys: pytest.CaptureFixture, name: str, what: str
) -> None:
    config, _ = finished
    out = tmp_path / "run"
    (out / name).mkdir(parents=True)  # a folder where the file belongs: writing it fails, even as root
    assert _train(config, out) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"could not write {what} {out / name}" in err


def test_a_metrics_append_that_fails_mid_run_stops_with_the_path(
    tmp_path: Path, finished: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    config, _ = finished
    appends, real = [], metrics_log.open_append

    def full_disk_at_the_15th_append(file: Path):
        appends.append(file)
        if len(appends) == 15:
            raise OSError(28, "No space left on device", str(file))
        return real(file)

    monkeypatch.setattr(metrics_log, "open_append", full_disk_at_the_15th_append)
    out = tmp_path / "run"
    assert _train(config, out) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"could not write the metrics log {out / 'metrics.jsonl'}: No space left on device" in err
    verify(out / "checkpoints" / "step-00000010")


def test_a_loss_curve_that_cannot_be_written_is_a_warning(
    tmp_path: Path, finished: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("matplotlib")
    config, _ = finished
    out = tmp_path / "run"
    (out / "loss.png").mkdir(parents=True)
    assert _train(config, out) == 0
    printed = capsys.readouterr()
    assert f"could not write the loss curve {out / 'loss.png'}" in printed.out + printed.err
    assert not (out / "loss.tmp.png").exists()
