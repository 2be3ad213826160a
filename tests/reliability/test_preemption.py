"""Preemption: SIGTERM (what Slurm and Kubernetes send before a kill) saves the step reached, exits 143, and
`--resume` continues exactly; a second signal while saving stops at once, the previous checkpoint intact;
under torchrun every rank stops at the same step (`posformer.train.interrupt`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from posformer.cli import main
from posformer.tasks import causal_lm
from posformer.train import training_checkpoint
from posformer.train.batches import WindowBatches
from posformer.train.interrupt import TERMINATED, Terminated
from posformer.train.settings import RunSettings
from posformer.train.trainer import Trainer
from posformer.train.training_checkpoint import CheckpointManager, verify
from train_helpers import assert_same_run, logged_step, losses, tiny_run, write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]
END = 40  # every run ends here: the signals land at step 13 or a little later
SIGNAL_AT = 13  # between the checkpoints of steps 10 and 20


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "text.txt")


def run(corpus: Path, steps: int, **trainer) -> dict:
    """The tiny run, with a constant schedule: the lr of a step does not depend on trainer.steps, so a run
    preempted on its way to 100,000 steps and resumed with trainer.steps=END follows the END-step run."""
    return tiny_run(corpus, steps, schedule="constant", **trainer)


def train(config: Path, out: Path, *extra: str) -> int:
    return main(["train", "--config", str(config), "--output-dir", str(out), "--no-progress", *extra])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """The uninterrupted END-step run."""
    root = tmp_path_factory.mktemp("reference")
    assert train(write_config(root / "run.yaml", run(corpus, END)), root / "run") == 0
    return root / "run"


def default_signals() -> None:
    """In the child: SIGINT and SIGTERM back to their defaults, whatever the shell that started the tests left."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def sigterm_at(command: list[str], out: Path, log: Path) -> tuple[int, str]:
    """Run `command`; once step SIGNAL_AT is logged send it SIGTERM. (exit status, its output)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    with open(log, "w") as file:
        proc = subprocess.Popen(
            command,
            env={**env, "OMP_NUM_THREADS": "1"},
            cwd=REPO,
            stdout=file,
            stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
        )
    deadline = time.monotonic() + 300
    while logged_step(out) < SIGNAL_AT:
        assert proc.poll() is None, f"the run ended before step {SIGNAL_AT}: {log.read_text()}"
        assert time.monotonic() < deadline, "the run made no progress in 300 s"
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=120), log.read_text()


def newest(out: Path) -> int:
    return CheckpointManager(out, 3).checkpoints()[0].step


def cli(config: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "posformer.cli", "train", "--config", str(config), "--output-dir", str(out)]


def test_sigterm_saves_the_step_reached_exits_143_and_resume_equals_the_uninterrupted_run(
    tmp_path: Path, corpus: Path, reference: Path
) -> None:
    config, out = write_config(tmp_path / "run.yaml", run(corpus, 100_000)), tmp_path / "run"
    status, output = sigterm_at([*cli(config, out), "--no-progress"], out, tmp_path / "log.txt")
    assert status == TERMINATED == 143, output
    step = logged_step(out)
    assert SIGNAL_AT <= step < END
    where = out / "checkpoints" / f"step-{step:08d}"
    assert f"SIGTERM at step {step}: saved checkpoint {where}; resume with --resume" in output
    assert newest(out) == step, "the step in flight finished and was saved: no finished step is lost"
    verify(where)
    assert (out / "loss.png").is_file()
    assert train(config, out, "--resume", "--set", f"trainer.steps={END}") == 0
    assert_same_run(out, reference, END)


class SignallingBatches(WindowBatches):
    """WindowBatches that send this process `FIRST` while step SIGNAL_AT is in flight."""

    first = signal.SIGTERM
    calls = 0

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, torch.Tensor]:
        SignallingBatches.calls += 1
        if SignallingBatches.calls == SIGNAL_AT:
            os.kill(os.getpid(), self.first)
        return super().next_batch(global_size, rank, world_size)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_second_signal_while_saving_stops_at_once_and_the_previous_checkpoint_stays(
    signum: int, tmp_path: Path, corpus: Path, reference: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policy: the first signal saves the step reached and stops; a second one stops at once, dropping the
    checkpoint being written (its temporary folder), the previous ones intact."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("something else handles SIGTERM in this process: the trainer leaves it alone")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored, even in a background shell
    monkeypatch.setattr(SignallingBatches, "first", signum)
    monkeypatch.setattr(SignallingBatches, "calls", 0)
    monkeypatch.setattr(causal_lm, "WindowBatches", SignallingBatches)
    fsync = training_checkpoint._fsync

    def fsync_then_signal(path: Path) -> None:
        fsync(path)
        if f"step-{SIGNAL_AT:08d}" in str(path):
            os.kill(os.getpid(), signum)  # mid-save: the files are written, the folder not yet renamed into place

    monkeypatch.setattr(training_checkpoint, "_fsync", fsync_then_signal)
    config, out = write_config(tmp_path / "run.yaml", run(corpus, END)), tmp_path / "run"
    try:
        with pytest.raises(Terminated if signum == signal.SIGTERM else KeyboardInterrupt) as stopped:
            causal_lm.train_causal_lm(RunSettings.from_dict(run(corpus, END)), str(out), progress=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "again: stopped at once, without a checkpoint" in str(stopped.value)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the trainer's handlers are removed"
    assert [c.step for c in CheckpointManager(out, 3).checkpoints()] == [10]
    verify(out / "checkpoints" / "step-00000010")
    assert not list((out / "checkpoints").glob(".tmp-*")), "the checkpoint being written is dropped"
    monkeypatch.undo()
    assert train(config, out, "--resume") == 0
    assert_same_run(out, reference, END)


# ------------------------------------------------------------------------------------ torchrun, gloo on the CPU
DDP = {"trainer.batch_size": 4, "trainer.lr": 3e-3, "model.dropout": 0.0, "trainer.device": "cpu"}
TOLERANCE = dict(rtol=1e-5, atol=1e-6)  # 2 processes x batch 4 against 1 x 8: float32 summation order only


def test_sigterm_under_torchrun_stops_every_rank_at_one_step_and_resumes(tmp_path: Path, corpus: Path) -> None:
    """torchrun passes SIGTERM on to its workers; they agree on the step (a max all-reduce of the signal each step),
    save it once (rank 0) and stop. Resumed in one process with the same global batch, the run follows the
    one-process run to float32 rounding."""
    config, out = write_config(tmp_path / "run.yaml", run(corpus, 100_000)), tmp_path / "run"
    overrides = [arg for key, value in DDP.items() for arg in ("--set", f"{key}={value}")]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m"]
    command = [*torchrun, *cli(config, out)[2:], "--no-progress", *overrides]
    status, output = sigterm_at(command, out, tmp_path / "log.txt")
    assert status != 0
    step = logged_step(out)
    assert output.count(f"SIGTERM at step {step}: saved checkpoint") == 1, output  # rank 0 speaks for both
    assert newest(out) == step
    single = ["--set", "trainer.batch_size=8", "--set", "trainer.lr=3e-3", "--set", "model.dropout=0.0"]
    assert train(config, out, "--resume", "--set", f"trainer.steps={END}", *single) == 0
    assert train(config, tmp_path / "single", "--set", f"trainer.steps={END}", *single) == 0
    got, want = losses(out), losses(tmp_path / "single")
    assert [s for s, _ in got] == list(range(1, END + 1))
    torch.testing.assert_close(torch.tensor([x for _, x in got]), torch.tensor([x for _, x in want]), **TOLERANCE)


def test_sigterm_during_an_evaluation_saves_that_step_exits_and_resume_equals_the_uninterrupted_run(
    tmp_path: Path, corpus: Path, reference: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal lands inside the evaluation of step 20: the evaluation ends, step 20 is saved, the run stops
    with SIGTERM's exception and `--resume` continues exactly."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("something else handles SIGTERM in this process: the trainer leaves it alone")
    evaluate = Trainer._evaluate

    def evaluate_then_signal(self: Trainer, step: int, bar) -> dict:
        if step == 20:
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(self, step, bar)

    monkeypatch.setattr(Trainer, "_evaluate", evaluate_then_signal)
    config, out = write_config(tmp_path / "run.yaml", run(corpus, END)), tmp_path / "run"
    with pytest.raises(Terminated, match="SIGTERM at step 20: saved checkpoint"):
        causal_lm.train_causal_lm(RunSettings.from_dict(run(corpus, END)), str(out), progress=False)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the trainer's handlers are removed"
    assert newest(out) == 20 and logged_step(out) == 20
    verify(out / "checkpoints" / "step-00000020")
    monkeypatch.undo()
    assert train(config, out, "--resume") == 0
    assert_same_run(out, reference, END)
