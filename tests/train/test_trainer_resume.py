"""Crash safety of the trainer: killed runs, damaged and foreign checkpoints, and exact resume.

A run killed at a random moment (SIGKILL, or Ctrl-C) and resumed with --resume must
log the same loss at every step and end with the same weights as the run that was
never interrupted; a damaged newest checkpoint is reported and the previous one used.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from posformer.cli import main
from posformer.tasks import causal_lm
from posformer.tasks.causal_lm import train_causal_lm
from posformer.train import training_checkpoint
from posformer.train.batches import WindowBatches
from posformer.train.settings import RunSettings
from posformer.train.training_checkpoint import CheckpointManager, verify
from train_helpers import (
    assert_same_run,
    flip_byte,
    logged_step,
    losses,
    tiny_run,
    truncate,
    write_config,
    write_corpus,
)

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
KILL_STEPS = 200  # checkpoints every 10 steps; the signals land between the first checkpoint and step ~55,
# far enough from the end that a run finishing while the test polls under load is no concern
STEPS = 40  # the in-process runs: checkpoints at 10, 20, 30, 40 (the newest 3 kept)
CRASH_AT = 35  # the in-process crashed run dies while computing step 35, after checkpoint 30


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "text.txt")


# ------------------------------------------------------------------ real kills of a `posformer train` process
def cli(config: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "posformer.cli",
        "train",
        "--config",
        str(config),
        "--output-dir",
        str(out),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> tuple[dict, Path]:
    """(config, run dir) of the uninterrupted KILL_STEPS run (trained in this process: the same numbers as
    `posformer train`, since every run is a function of its settings alone)."""
    config = tiny_run(corpus, KILL_STEPS)
    out = tmp_path_factory.mktemp("long_reference") / "run"
    train(config, out)
    return config, out


def default_ctrl_c() -> None:
    """In the child: SIGINT back to its default. A test suite started in the background of a non-interactive
    shell ignores SIGINT, and its children inherit that; the run would then never see the Ctrl-C it is sent."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_at_random(config: Path, out: Path, rng: random.Random, sig: int, after_step: int) -> int:
    """Run (resuming when `out` has checkpoints); once a checkpoint exists and a random step past `after_step` is
    logged, wait a random 0-20 ms and send `sig`. Returns the step logged just before the signal."""
    target = rng.randrange(after_step + 3, after_step + 25)
    resume = ["--resume"] if (out / "checkpoints").is_dir() else []
    with open(out.parent / f"log-{target}.txt", "w") as log:
        proc = subprocess.Popen(
            cli(config, out, *resume),
            env=ENV,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=default_ctrl_c,
        )
        deadline = time.monotonic() + 120
        while not (any(out.glob("checkpoints/step-*/manifest.json")) and logged_step(out) >= target):
            assert proc.poll() is None, f"the run ended before step {target}: {(out.parent / log.name).read_text()}"
            assert time.monotonic() < deadline, "the run made no progress in 120 s"
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.02))
        proc.send_signal(sig)
        proc.wait(timeout=120)
    expected = -signal.SIGKILL if sig == signal.SIGKILL else 130  # the CLI exits 130 on Ctrl-C
    assert proc.returncode == expected, f"the run was not interrupted (exit {proc.returncode})"
    return logged_step(out)


def test_killed_then_interrupted_at_random_moments_then_resumed_equals_the_uninterrupted_run(
    tmp_path: Path, long_reference: tuple[dict, Path]
) -> None:
    config, reference = long_reference
    path = write_config(tmp_path / "run.yaml", config)
    out = tmp_path / "run"
    rng = random.Random(20240605)  # fixed: reproducible, yet the two signals land at different steps and phases
    step = 0
    for sig in (signal.SIGKILL, signal.SIGINT):  # `posformer train`, then `posformer train --resume`
        step = interrupt_at_random(path, out, rng, sig, after_step=step)
        found = CheckpointManager(out, keep_last=3).checkpoints()
        for checkpoint in found:  # only complete checkpoint folders: a partial write lives in a .tmp-* folder
            verify(checkpoint.path)
        if sig == signal.SIGINT:  # Ctrl-C waits for the step in flight, then saves it: no finished step is lost
            assert found[0].step == step
        partial = out / "checkpoints" / f".tmp-step-{step + 1:08d}-1"  # as a kill inside CheckpointManager.save
        partial.mkdir()
        (partial / "model.safetensors").write_bytes(b"\x00" * 7)
    logs = train(config, out, resume=True)
    assert f"resumed from {out / 'checkpoints' / f'step-{step:08d}'} (step {step})" in logs
    assert_same_run(out, reference, KILL_STEPS)
    assert not list((out / "checkpoints").glob(".tmp-*")), "partial writes must be removed on resume"


# ------------------------------------------------------------- in-process runs: damaged and foreign checkpoints
class Crash(Exception):
    """Stands for a SIGKILL: the process dies without saving anything."""


class CrashingBatches(WindowBatches):
    """WindowBatches that kill the run when it asks for the batch of step CRASH_AT."""

    calls = 0

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls == CRASH_AT:
            raise Crash
        return super().next_batch(global_size, rank, world_size)


def train(config: dict, out: Path, resume: bool = False) -> list[str]:
    """Train in this process; the log lines."""
    logs: list[str] = []
    train_causal_lm(RunSettings.from_dict(config), str(out), resume=resume, log=logs.append, progress=False)
    return logs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> tuple[dict, Path, Path]:
    """(config, the uninterrupted run, a run killed at step CRASH_AT with checkpoints 10, 20, 30)."""
    root = tmp_path_factory.mktemp("runs")
    config = tiny_run(corpus, STEPS)
    train(config, root / "reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(causal_lm, "WindowBatches", CrashingBatches)
        with pytest.raises(Crash):
            train(config, root / "crashed")
    assert [c.step for c in CheckpointManager(root / "crashed", 3).checkpoints()] == [30, 20, 10]
    assert logged_step(root / "crashed") == CRASH_AT - 1
    return config, root / "reference", root / "crashed"


def crashed_copy(runs: tuple[dict, Path, Path], tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(runs[2], out)
    return out


def checkpoint(out: Path, step: int) -> Path:
    return out / "checkpoints" / f"step-{step:08d}"


DAMAGE = {  # how a checkpoint is damaged -> what the fallback message says
    "truncated weights": (lambda c: truncate(c / "model.safetensors"), "truncated"),
    "truncated trainer state": (lambda c: truncate(c / "trainer_state.pt"), "truncated"),
    "deleted manifest": (lambda c: (c / "manifest.json").unlink(), "no manifest.json"),
    "garbage manifest": (lambda c: (c / "manifest.json").write_bytes(b"\x89\xff{not json"), "unreadable"),
    "flipped byte in weights": (lambda c: flip_byte(c / "model.safetensors"), "SHA-256"),
    "config.json replaced": (lambda c: (c / "config.json").write_text("{}"), "the manifest says"),
    "manifest listing nothing": (
        lambda c: (truncate(c / "model.safetensors"), (c / "manifest.json").write_text('{"step": 30, "files": {}}')),
        "does not list ['config.json', 'model.safetensors', 'trainer_state.pt']",
    ),
    "manifest of another layout": (
        lambda c: (c / "manifest.json").write_text('{"files": ["model.safetensors"]}'),
        "unreadable",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_newest_checkpoint_falls_back_to_the_previous_and_ends_identical(
    runs: tuple[dict, Path, Path], tmp_path: Path, damage: str
) -> None:
    config, reference, _ = runs
    out = crashed_copy(runs, tmp_path)
    spoil, reason = DAMAGE[damage]
    spoil(checkpoint(out, 30))
    logs = train(config, out, resume=True)
    skipped = [line for line in logs if line.startswith(f"checkpoint {checkpoint(out, 30)} is unusable")]
    assert len(skipped) == 1 and reason in skipped[0] and "falling back to the previous one" in skipped[0]
    assert f"resumed from {checkpoint(out, 20)} (step 20)" in logs
    assert_same_run(out, reference, STEPS)


def test_two_damaged_checkpoints_fall_back_two_and_partial_writes_are_removed(
    runs: tuple[dict, Path, Path], tmp_path: Path
) -> None:
    config, reference, _ = runs
    out = crashed_copy(runs, tmp_path)
    truncate(checkpoint(out, 30) / "model.safetensors")
    (checkpoint(out, 20) / "manifest.json").unlink()
    partial = out / "checkpoints" / f".tmp-step-{40:08d}-4242"  # a write killed before its rename
    shutil.copytree(checkpoint(out, 30), partial)
    logs = train(config, out, resume=True)
    assert sum("is unusable" in line for line in logs) == 2
    assert f"resumed from {checkpoint(out, 10)} (step 10)" in logs
    assert not partial.exists()
    assert_same_run(out, reference, STEPS)


def test_every_checkpoint_unusable_is_an_error_that_touches_nothing(
    runs: tuple[dict, Path, Path], tmp_path: Path
) -> None:
    config, _, _ = runs
    out = crashed_copy(runs, tmp_path)
    for step in (10, 20, 30):
        truncate(checkpoint(out, step) / "trainer_state.pt")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    logs: list[str] = []
    with pytest.raises(ValueError, match="none of the 3 checkpoints") as err:
        train_causal_lm(RunSettings.from_dict(config), str(out), resume=True, log=logs.append, progress=False)
    assert "start again from step 0" in str(err.value)
    assert sum("is unusable" in line for line in logs) == 3
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # the log and checkpoints kept


def test_resume_without_any_checkpoint_starts_at_step_zero(runs: tuple[dict, Path, Path], tmp_path: Path) -> None:
    config, reference, _ = runs
    logs = train(config, tmp_path / "fresh", resume=True)
    assert any("no checkpoint" in line and "starting from step 0" in line for line in logs)
    assert_same_run(tmp_path / "fresh", reference, STEPS)


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.d_model=64", "different model (fields ['d_model'"),
        ("model.position=alibi", "different model (fields ['position'"),
        ("trainer.seed=7", "resume with the same trainer.seed"),
    ],
)
def test_checkpoint_of_another_model_or_seed_is_a_clear_error(
    runs: tuple[dict, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture, override: str, message: str
) -> None:
    config, _, _ = runs
    out = crashed_copy(runs, tmp_path)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    path = write_config(tmp_path / "run.yaml", config)
    assert (
        main(["train", "--config", str(path), "--output-dir", str(out), "--resume", "--set", override, "--no-progress"])
        == 2
    )
    assert message in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_existing_checkpoints_without_resume_is_a_clear_error(
    runs: tuple[dict, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    config, _, _ = runs
    out = crashed_copy(runs, tmp_path)
    metrics = (out / "metrics.jsonl").read_bytes()
    path = write_config(tmp_path / "run.yaml", config)
    assert main(["train", "--config", str(path), "--output-dir", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "already holds checkpoints (newest: step 30)" in err and "--resume" in err
    assert (out / "metrics.jsonl").read_bytes() == metrics
    assert losses(out)[-1][0] == CRASH_AT - 1


def test_a_kill_while_pruning_leaves_no_partial_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = CheckpointManager(tmp_path, keep_last=1, log=lambda line: None)
    model = nn.Linear(2, 2)
    manager.save(1, model, "{}", {"step": 1})
    rmtree = shutil.rmtree

    def killed_midway(path: Path, ignore_errors: bool = False) -> None:
        path = Path(path)
        if path.name.startswith(".tmp-delete-") and path.exists():
            next(path.iterdir()).unlink()  # the first file of the old checkpoint is deleted, then the process dies
            raise Crash
        rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(training_checkpoint.shutil, "rmtree", killed_midway)
    with pytest.raises(Crash):
        manager.save(2, model, "{}", {"step": 2})
    monkeypatch.undo()
    assert [c.step for c in manager.checkpoints()] == [2]  # the half-deleted one is no longer a checkpoint
    verify(manager.checkpoints()[0].path)
    manager.remove_partial_writes()
    assert sorted(p.name for p in manager.root.iterdir()) == ["step-00000002"]
