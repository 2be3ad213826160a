"""Family 6: `--resume` over a checkpoint tampered with consistently (its manifest rewritten to match).

The checksums cannot see such a change, so the trainer state's structure and the weights' fit to the config
are checked too: the checkpoint is reported (naming it and the file or field) and the previous one is used,
as for a checkpoint failing its manifest; with none left, a clean error. No pickle runs code.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Callable

import pytest
import torch
from checkpoint_fixtures import copy, refused, rewrite_manifest, step_dir, train_tiny_run
from safetensors.torch import load_file, save_file

from posformer.train.training_checkpoint import CheckpointManager
from train_helpers import write_config


class Payload:
    """Unpickling this would create a file: the proof that code ran from the pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def state(checkpoint: Path) -> dict:
    return torch.load(checkpoint / "trainer_state.pt", weights_only=True)


def edit_state(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def tamper(checkpoint: Path) -> None:
        loaded = state(checkpoint)
        change(loaded)
        torch.save(loaded, checkpoint / "trainer_state.pt")

    return tamper


def rng(**changes) -> Callable[[dict], None]:
    return lambda s: s["rng"].update(changes)


def write(name: str, content: bytes) -> Callable[[Path], None]:
    return lambda checkpoint: (checkpoint / name).write_bytes(content)


def misshaped_weights(checkpoint: Path) -> None:
    weights = load_file(checkpoint / "model.safetensors")
    save_file({k: torch.zeros(3) for k in weights}, checkpoint / "model.safetensors")


TAMPERING = {  # how -> (the tampering, what the message names)
    "garbage weights": (write("model.safetensors", b"garbage" * 10), "model.safetensors is truncated or corrupt"),
    "misshaped weights": (misshaped_weights, "wrong shapes"),
    "state not a dict": (lambda c: torch.save([1, 2], c / "trainer_state.pt"), "does not hold a dict"),
    "empty state file": (write("trainer_state.pt", b""), "trainer_state.pt cannot be read"),
    "no rng": (edit_state(lambda s: s.pop("rng")), "field 'rng' is missing"),
    "rng not a dict": (edit_state(lambda s: s.update(rng=5)), "field 'rng' is invalid: expected a dict"),
    "python rng": (edit_state(rng(python=5)), "field 'rng.python' is invalid"),
    "torch rng": (edit_state(rng(torch=torch.zeros(3))), "field 'rng.torch' is invalid"),
    "no optimizer": (edit_state(lambda s: s.pop("optimizer")), "field 'optimizer' is missing"),
    "optimizer groups": (edit_state(lambda s: s["optimizer"].update(param_groups=3)), "'optimizer.param_groups'"),
    "scheduler": (edit_state(lambda s: s.update(scheduler=[1])), "field 'scheduler' is invalid"),
    "empty scheduler": (edit_state(lambda s: s.update(scheduler={})), "field 'scheduler.last_epoch' is missing"),
    "moments of the wrong shape": (
        edit_state(lambda s: [m.update(exp_avg=torch.zeros(3)) for m in s["optimizer"]["state"].values()]),
        "a tensor of the parameter's shape",
    ),
    "unknown parameter": (
        edit_state(lambda s: s["optimizer"]["param_groups"][0].update(params=["nowhere"])),
        "the model's parameter names",
    ),
    "data position": (edit_state(lambda s: s["data"].update(index="7")), "field 'data.index' is invalid"),
    "step as text": (edit_state(lambda s: s.update(step="20")), "field 'step' is invalid: expected an integer"),
    "config not JSON": (write("config.json", b"{bad"), "config.json is not valid JSON"),
    "config a list": (write("config.json", b"[1]"), "config.json must hold a JSON object"),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the run config file, a finished 20-step run with checkpoints 10 and 20)."""
    config, run = train_tiny_run(tmp_path_factory.mktemp("trained"))
    return write_config(run.parent / "run.yaml", config), run


def resume(config: Path, run: Path) -> list[str]:
    return ["train", "--config", str(config), "--output-dir", str(run), "--no-progress", "--resume"]


def tampered_copy(
    trained: tuple[Path, Path], tmp_path: Path, tamper: Callable[[Path], None], steps: tuple[int, ...] = (20,)
) -> Path:
    run = copy(trained[1], tmp_path / "run")
    for step in steps:
        tamper(step_dir(run, step))
        rewrite_manifest(step_dir(run, step))
    return run


@pytest.mark.parametrize("how", list(TAMPERING))
def test_a_consistently_tampered_checkpoint_falls_back_to_the_previous(trained, tmp_path: Path, how: str) -> None:
    tamper, reason = TAMPERING[how]
    run = tampered_copy(trained, tmp_path, tamper)
    logs: list[str] = []
    found = CheckpointManager(run, keep_last=2, log=logs.append).latest_valid()
    assert found is not None and found[0].step == 10
    assert len(logs) == 1 and logs[0].startswith(f"checkpoint {step_dir(run, 20)} is unusable") and reason in logs[0]
    assert "falling back to the previous one" in logs[0]


def test_resume_over_a_malicious_pickle_runs_no_code_and_uses_the_previous(trained, tmp_path: Path, capsys) -> None:
    marker = tmp_path / "pwned"
    run = tampered_copy(trained, tmp_path, write("trainer_state.pt", pickle.dumps({"step": Payload(marker)})))
    from posformer.cli import main

    assert main(resume(trained[0], run)) == 0
    out = capsys.readouterr().out
    assert f"checkpoint {step_dir(run, 20)} is unusable" in out and "weights_only=True" in out
    assert f"resumed from {step_dir(run, 10)} (step 10)" in out
    assert not marker.exists()


@pytest.mark.parametrize("how", ["no rng", "garbage weights"])
def test_resume_with_no_valid_checkpoint_left_is_a_clean_error(trained, tmp_path: Path, how: str) -> None:
    run = tampered_copy(trained, tmp_path, TAMPERING[how][0], steps=(10, 20))
    assert "none of the 2 checkpoints" in refused(*resume(trained[0], run))
