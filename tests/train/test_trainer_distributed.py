"""The trainer under torchrun: two CPU processes (gloo) through the real `posformer train` entry point.

One process with batch 2b and two processes with batch b each see the same global
batches (WindowBatches hands rank r rows [r*b, (r+1)*b) of each one), so they must
follow the same loss curve and end at the same weights, up to float32 summation
order; DDP and FSDP must agree the same way; a run stopped and resumed under
torchrun must continue exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from posformer.checkpoints.native import load_pretrained
from posformer.cli import main
from posformer.train.settings import RunSettings, load_run_settings
from posformer.train.training_checkpoint import verify

B = 4  # sequences per process and step
STEPS, SAVE = 20, 10
# constant schedule: the lr of a step does not depend on trainer.steps, so a run stopped at
# step 10 (trainer.steps=10) and resumed with trainer.steps=20 follows the 20-step run; the
# warm-up (15 steps) crosses the resume point, so the scheduler's state must come back too
SETTINGS = {
    "data.seq_len": 32,
    "model.d_model": 32,
    "model.n_layers": 1,
    "model.n_heads": 2,
    "model.d_ff": 64,
    "model.dropout": 0.0,
    "trainer.lr": 3e-3,
    "trainer.schedule": "constant",
    "trainer.warmup": 15,
    "trainer.eval_every": SAVE,
    "trainer.sample_tokens": 8,
}
# The runs differ only in the order of float32 sums (one backward over 2b rows against two over
# b rows and an all-reduce; FSDP's reduce-scatter against DDP's all-reduce). Observed after 20
# steps: losses within 4.8e-7 (1.4e-7 relative), weights within 1.2e-7 (FSDP vs DDP: 2.4e-7 and
# 4.8e-8); the tolerance leaves a 10x margin. (At lr 1e-2 this tiny model turns unstable after
# ~12 steps and amplifies the same rounding to 5e-6 in the weights: hence lr 3e-3.)
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def _args(out: Path, batch: int, eval_batches: int, steps: int, extra: dict | None = None) -> list[str]:
    settings = {
        **SETTINGS,
        "trainer.batch_size": batch,
        "trainer.eval_batches": eval_batches,
        "trainer.steps": steps,
        **(extra or {}),
    }
    return [
        "train",
        "--output-dir",
        str(out),
        "--no-progress",
        *[arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")],
    ]


def torchrun(out: Path, steps: int = STEPS, resume: bool = False, parallel: str = "ddp") -> str:
    """`torchrun --nproc_per_node 2 -m posformer.cli train ...` on the CPU; returns its stdout."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "posformer.cli",
        *_args(out, B, 2, steps, {"trainer.parallel": parallel, "trainer.device": "cpu"}),
    ]
    if resume:
        command.append("--resume")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):  # a clean launch, even from inside torchrun
        env.pop(name, None)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-6000:]}"
    return done.stdout


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def losses(out: Path) -> torch.Tensor:
    """The training loss of steps 1..N, checking each step was logged exactly once."""
    train = [r for r in records(out) if "loss" in r]
    assert [r["step"] for r in train] == list(range(1, len(train) + 1))
    return torch.tensor([r["loss"] for r in train], dtype=torch.float64)


def val_losses(out: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["eval"]["val_loss"]) for r in records(out) if "eval" in r]


def weights(out: Path, step: int = STEPS) -> dict[str, torch.Tensor]:
    return load_file(out / "checkpoints" / f"step-{step:08d}" / "model.safetensors")


def optimizer_state(out: Path, step: int = STEPS) -> dict:
    path = out / "checkpoints" / f"step-{step:08d}" / "trainer_state.pt"
    return torch.load(path, map_location="cpu", weights_only=True)["optimizer"]


def assert_weights_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], exact: bool = False) -> float:
    """Same names, and values equal (exact) or within TOLERANCE; returns the largest difference."""
    assert sorted(a) == sorted(b)
    for name in a:
        if exact:
            assert torch.equal(a[name], b[name]), name
        else:
            torch.testing.assert_close(a[name], b[name], **TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """One process, batch 2b (evaluating the same 8 windows as the 2-process runs)."""
    out = tmp_path_factory.mktemp("single") / "run"
    assert main(_args(out, 2 * B, 1, STEPS, {"trainer.device": "cpu"})) == 0
    return out


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ddp") / "run"
    return out, torchrun(out)


@pytest.fixture(scope="module")
def ddp_resumed(tmp_path_factory) -> tuple[Path, str]:
    """Stopped at step 10, then resumed with --resume to step 20, both legs under torchrun."""
    out = tmp_path_factory.mktemp("ddp_resumed") / "run"
    torchrun(out, steps=SAVE)
    return out, torchrun(out, resume=True)


@pytest.fixture(scope="module")
def fsdp_resumed(tmp_path_factory) -> tuple[Path, Path, str]:
    """trainer.parallel=fsdp: stopped at step 10 (a copy kept), then resumed to step 20."""
    root = tmp_path_factory.mktemp("fsdp")
    out, first_leg = root / "run", root / "first_leg"
    torchrun(out, steps=SAVE, parallel="fsdp")
    shutil.copytree(out, first_leg)
    return out, first_leg, torchrun(out, resume=True, parallel="fsdp")


def test_two_processes_match_one_process_with_twice_the_batch(single, ddp) -> None:
    out, _ = ddp
    one, two = losses(single), losses(out)
    assert len(one) == len(two) == STEPS and one[-1] < one[0] - 0.3  # it learns
    torch.testing.assert_close(two, one, **TOLERANCE)
    (s1, v1), (s2, v2) = zip(*val_losses(single)), zip(*val_losses(out))
    assert s1 == s2 == (SAVE, STEPS)
    torch.testing.assert_close(torch.tensor(v2), torch.tensor(v1), **TOLERANCE)
    assert_weights_close(weights(out), weights(single))


def test_only_rank_zero_writes_the_log_checkpoints_and_sample(ddp) -> None:
    out, stdout = ddp
    assert len(losses(out)) == STEPS  # each step logged once, not once per process
    assert [s for s, _ in val_losses(out)] == [SAVE, STEPS]
    assert len(records(out)) == STEPS + 2
    folders = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert folders == [f"step-{SAVE:08d}", f"step-{STEPS:08d}"]  # no staging folders left by a second writer
    for step in (SAVE, STEPS):
        assert verify(out / "checkpoints" / f"step-{step:08d}")["step"] == step
    assert (out / "loss.png").stat().st_size > 0 and (out / "run_config.yaml").is_file()
    assert stdout.count(f"sample after {STEPS} steps") == 1 and stdout.count("loss curve:") == 1
    model = load_pretrained(out / "checkpoints" / f"step-{STEPS:08d}")
    assert model.head.proj.weight is model.embed_tokens.weight


def test_resume_under_torchrun_continues_exactly(ddp, ddp_resumed) -> None:
    (out, _), (resumed, stdout) = ddp, ddp_resumed
    assert f"step-{SAVE:08d} (step {SAVE})" in stdout  # "resumed from .../step-00000010 (step 10)"
    assert torch.equal(losses(resumed), losses(out))
    assert val_losses(resumed) == val_losses(out)
    assert_weights_close(weights(resumed), weights(out), exact=True)
    a, b = optimizer_state(resumed), optimizer_state(out)
    assert list(a["state"]) == list(b["state"])
    for name, state in a["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["state"][name][key]), (name, key)


def test_fsdp_matches_ddp_and_resumes(ddp, fsdp_resumed) -> None:
    (out, _), (fsdp, _, stdout) = ddp, fsdp_resumed
    assert f"step-{SAVE:08d} (step {SAVE})" in stdout and stdout.count(f"sample after {STEPS} steps") == 1
    torch.testing.assert_close(losses(fsdp), losses(out), **TOLERANCE)
    torch.testing.assert_close(
        torch.tensor([v for _, v in val_losses(fsdp)]), torch.tensor([v for _, v in val_losses(out)]), **TOLERANCE
    )
    assert_weights_close(weights(fsdp), weights(out))
    a, b = optimizer_state(fsdp), optimizer_state(out)  # one format: keyed by parameter name
    assert list(a["state"]) == list(b["state"]) and "embed_tokens.weight" in a["state"]
    for name, state in a["state"].items():
        torch.testing.assert_close(state["exp_avg_sq"], b["state"][name]["exp_avg_sq"], **TOLERANCE)
    model = load_pretrained(fsdp / "checkpoints" / f"step-{STEPS:08d}")  # gathered, tied weights stored once
    assert model.head.proj.weight is model.embed_tokens.weight


def test_fsdp_checkpoint_resumes_in_one_process(single, fsdp_resumed) -> None:
    """The FSDP run's step-10 checkpoint, resumed by one process with batch 2b, ends where one process ends."""
    _, first_leg, _ = fsdp_resumed
    out = first_leg.parent / "resumed_alone"
    shutil.copytree(first_leg, out)
    assert main([*_args(out, 2 * B, 1, STEPS, {"trainer.device": "cpu"}), "--resume"]) == 0
    torch.testing.assert_close(losses(out), losses(single), **TOLERANCE)
    assert_weights_close(weights(out), weights(single))


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run_causal_lm.yaml"


def test_example_run_config_is_the_demo_and_runs(tmp_path) -> None:
    """examples/run_causal_lm.yaml (the README's example) loads, spells out the demo's settings, and trains."""
    assert load_run_settings(str(EXAMPLE)).to_dict() == RunSettings().to_dict()
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--config",
                str(EXAMPLE),
                "--output-dir",
                str(out),
                "--no-progress",
                "--set",
                "trainer.steps=3",
                "--set",
                "trainer.eval_batches=1",
                "--set",
                "trainer.sample_tokens=0",
            ]
        )
        == 0
    )
    assert len(losses(out)) == 3 and verify(out / "checkpoints" / "step-00000003")["step"] == 3
