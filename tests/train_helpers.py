"""Helpers of the trainer tests: a tiny causal-LM run config, its logged losses and its final weights."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from posformer.data.text import default_corpus, read_text

CORPUS_CHARS = 20_000


def write_corpus(path: Path) -> Path:
    """The first 20,000 characters of the shipped sample: 18,000 training and 2,000 validation tokens."""
    path.write_text(read_text(default_corpus())[:CORPUS_CHARS])
    return path


def tiny_run(corpus: Path, steps: int, dropout: float = 0.1, **trainer) -> dict:
    """A run config: d_model 32, one layer, seq_len 32, batch 8, a checkpoint every 10 steps (eval_every)."""
    return {
        "model": {
            "arch": "decoder",
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "d_ff": 64,
            "position": "rope",
            "norm": "rmsnorm",
            "activation": "swiglu",
            "dropout": dropout,
            "tie_embeddings": True,
        },
        "data": {"train": [str(corpus)], "seq_len": 32},
        "trainer": {
            "steps": steps,
            "batch_size": 8,
            "lr": 1e-2,
            "warmup": 5,
            "eval_every": 10,
            "eval_batches": 1,
            "keep_last": 3,
            "sample_tokens": 0,
            "device": "cpu",
            **trainer,
        },
    }


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, training loss) in the order metrics.jsonl holds them."""
    return [(r["step"], r["loss"]) for r in records(run_dir) if "loss" in r]


def evals(run_dir: Path) -> list[tuple[int, dict]]:
    return [(r["step"], r["eval"]) for r in records(run_dir) if "eval" in r]


def final_weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / f"step-{step:08d}" / "model.safetensors"))


def assert_same_run(run_dir: Path, reference: Path, steps: int) -> None:
    """Exactly the reference run: the loss of every step, each logged once, the evaluations and the final weights."""
    got, want = losses(run_dir), losses(reference)
    assert [s for s, _ in got] == list(range(1, steps + 1))
    assert got == want
    assert evals(run_dir) == evals(reference)
    weights, expected = final_weights(run_dir, steps), final_weights(reference, steps)
    assert weights.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(weights[name], tensor), f"{name} differs from the uninterrupted run"


def truncate(path: Path) -> None:
    """Cut the file at `path` to half its size (a write that died midway)."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_byte(path: Path) -> None:
    """Invert the middle byte of the file at `path` (silent corruption)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def finished_run(root: Path, steps: int) -> tuple[Path, Path]:
    """(config file, run dir) of a finished `posformer train` run of `steps` steps under `root`."""
    from posformer.cli import main

    config = write_config(root / "run.yaml", tiny_run(write_corpus(root / "text.txt"), steps))
    assert main(["train", "--config", str(config), "--output-dir", str(root / "run"), "--no-progress"]) == 0
    return config, root / "run"


def logged_step(run_dir: Path) -> int:
    """The last step metrics.jsonl records (0 before the first)."""
    path = run_dir / "metrics.jsonl"
    step = 0
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            step = max(step, json.loads(line)["step"])
        except json.JSONDecodeError:  # a line being written
            break
    return step
