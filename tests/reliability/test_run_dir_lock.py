"""One writer per run directory: a second process is refused by name, a killed one leaves the directory free.

Two `posformer train` runs in one output dir used to both pass the "already holds checkpoints" check and
interleave metrics.jsonl; a `--resume` started while the run wrote duplicated steps. Every command that writes
a run directory now holds `OUTPUT_DIR/.posformer.lock` (`posformer.train.run_lock`) for its life.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posformer.cli import main
from posformer.tasks.causal_lm import train_causal_lm
from posformer.train import run_lock
from posformer.train.run_lock import LOCK_FILE, RunDirBusy, RunDirLock, check_output_dir, holds_run_dir
from posformer.train.settings import RunSettings
from posformer.train.training_checkpoint import CheckpointManager
from train_helpers import logged_step, records, tiny_run, write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
BUSY = "is being written by another posformer process"
HOLD = "import sys, time; from posformer.train.run_lock import RunDirLock; RunDirLock(sys.argv[1]).acquire(); "
HOLD += "print('held', flush=True); time.sleep(600)"


def hold(directory: Path) -> subprocess.Popen:
    """Another process that holds `directory` until it is killed."""
    env = {k: v for k, v in ENV.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held", "the holder did not start"
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def refusal(directory: Path, pid: int) -> str:
    return f"{directory} {BUSY} (pid {pid}, command "


@pytest.fixture
def holder(tmp_path: Path):
    directory = tmp_path / "run"
    proc = hold(directory)
    yield directory, proc
    if proc.poll() is None:
        kill(proc)


def test_a_second_writer_is_refused_by_name_while_the_first_holds(holder: tuple[Path, subprocess.Popen]) -> None:
    directory, proc = holder
    for claim in (lambda: RunDirLock(directory).acquire(), lambda: check_output_dir(directory)):
        with pytest.raises(RunDirBusy) as refused:
            claim()
        message = str(refused.value)
        assert message.startswith(refusal(directory, proc.pid)), message
        assert message.endswith("; wait for it or choose another --output-dir")
    assert not holds_run_dir(directory)


def test_after_the_holder_is_killed_the_directory_can_be_taken(holder: tuple[Path, subprocess.Popen]) -> None:
    directory, proc = holder
    kill(proc)  # no clean-up ran: the kernel dropped the lock with the process
    with RunDirLock(directory):
        assert holds_run_dir(directory)
        assert json.loads((directory / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not holds_run_dir(directory)
    assert not (directory / LOCK_FILE).exists(), "a released lock leaves no lock file"


def test_one_process_claims_a_directory_once_and_releases_it_with_the_context(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    with RunDirLock(directory):
        check_output_dir(directory)  # the command's Trainer inside the command's own claim: no conflict
        with RunDirLock(directory):
            pass
        assert holds_run_dir(directory), "an inner claim must not release the outer one"
        with open(directory / LOCK_FILE) as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what another process would meet
    assert not (directory / LOCK_FILE).exists()
    with RunDirLock(directory):  # and the directory can be taken again
        assert holds_run_dir(directory)


def test_a_lock_file_deleted_by_its_releasing_holder_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that opened the lock file just before its holder released (and deleted) it would lock a file no
    other process can see: it must notice and lock the file the path names now."""
    directory = tmp_path / "run"
    first = RunDirLock(directory).acquire()
    stale = os.open(directory / LOCK_FILE, os.O_RDWR)  # opened while the first holder still holds it
    first.release()
    real_open, opened = run_lock._open, []

    def open_stale_first(path: Path) -> int:
        opened.append(path)
        return stale if len(opened) == 1 else real_open(path)

    monkeypatch.setattr(run_lock, "_open", open_stale_first)
    with RunDirLock(directory):
        assert len(opened) == 2, "the deleted file was taken instead of the one the path names"
        assert json.loads((directory / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not (directory / LOCK_FILE).exists()


def test_torchrun_ranks_other_than_zero_share_the_directory(
    holder: tuple[Path, subprocess.Popen], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, _ = holder
    monkeypatch.setenv("RANK", "1")
    with RunDirLock(directory):
        assert not holds_run_dir(directory)


def test_a_file_system_without_locks_is_used_unlocked_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_locks)
    with RunDirLock(tmp_path / "run"):
        assert not holds_run_dir(tmp_path / "run")
    assert f"warning: cannot lock {tmp_path / 'run' / LOCK_FILE} (No locks available): used unlocked" in (
        capsys.readouterr().err
    )


TINY_T5 = ["--from-scratch", "--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "64", "--no-progress"]
COMMANDS = {  # every command that writes a run directory, pointed at the held one (`{}`)
    "train": ["train", "--output-dir", "{}", "--no-progress"],
    "train --resume": ["train", "--output-dir", "{}", "--resume", "--no-progress"],
    "qa train": ["qa", "train", "--output-dir", "{}", *TINY_T5],
    "qa eval": ["qa", "eval", "--model", "{}"],
    "extrapolate": ["extrapolate", "--output-dir", "{}", "--preset", "quick", "--no-progress"],
    "extend": ["extend", "{}", "--output-dir", "{}", "--preset", "quick", "--target-len", "64", "--no-progress"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_that_writes_a_run_directory_is_refused_while_another_process_holds_it(
    command: str, holder: tuple[Path, subprocess.Popen], capsys: pytest.CaptureFixture
) -> None:
    directory, proc = holder
    argv = [str(directory) if arg == "{}" else arg for arg in COMMANDS[command]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert refusal(directory, proc.pid) in err, err
    assert sorted(p.name for p in directory.iterdir()) == [LOCK_FILE], "a refused command writes nothing"
    assert json.loads((directory / LOCK_FILE).read_text())["pid"] == proc.pid


# ---------------------------------------------------------------------- real `posformer train` processes
def test_a_second_run_or_a_resume_while_a_run_writes_is_refused_and_the_log_stays_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    config = tiny_run(write_corpus(tmp_path / "text.txt"), 100_000, schedule="constant")
    path, out = write_config(tmp_path / "run.yaml", config), tmp_path / "run"
    train = ["train", "--config", str(path), "--output-dir", str(out), "--no-progress"]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(
            [sys.executable, "-m", "posformer.cli", *train], env=ENV, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 120
        while logged_step(out) < 2 or not CheckpointManager(out, 3).checkpoints():  # killed later, it resumes
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline, "the first run made no progress in 120 s"
            time.sleep(0.01)
        for extra in ([], ["--resume"], ["--seed", "7"]):
            assert main([*train, *extra]) == 2
            assert refusal(out, first.pid) in capsys.readouterr().err
    finally:
        kill(first)
    steps = [r["step"] for r in records(out) if "loss" in r]
    assert steps == list(range(1, len(steps) + 1)), "one run's records, each step once"
    newest = CheckpointManager(out, 3).checkpoints()[0].step
    logs: list[str] = []
    settings = RunSettings.from_dict({**config, "trainer": {**config["trainer"], "steps": newest + 2}})
    train_causal_lm(settings, str(out), resume=True, log=logs.append, progress=False)  # the killed run's dir is free
    assert f"resumed from {out / 'checkpoints' / f'step-{newest:08d}'} (step {newest})" in logs
