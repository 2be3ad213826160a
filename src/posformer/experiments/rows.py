"""The rows of an experiment: models identical but for what the row varies, trained by the shared `Trainer`."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from posformer.config import Config
from posformer.model import Transformer
from posformer.train.metrics_log import MetricsLog
from posformer.train.rng import seed_everything
from posformer.train.trainer import Trainer


def reference_copy(model: Transformer, reference: Transformer) -> list[str]:
    """Copy every tensor of `reference` whose name and shape match into `model`; the names copied."""
    theirs = reference.state_dict()
    shared = {k: v for k, v in model.state_dict().items() if k in theirs and theirs[k].shape == v.shape}
    with torch.no_grad():
        for name, tensor in shared.items():
            tensor.copy_(theirs[name])
    return sorted(shared)


def seeded_model(config: Config, seed: int, reference: Transformer | None = None) -> Transformer:
    """The model of `config` initialised under `seed`, then every tensor it shares with `reference` copied in: rows
    that differ only in their encoding start from the same weights."""
    seed_everything(seed)
    model = Transformer(config)
    if reference is not None:
        reference_copy(model, reference)
    return model


def fit_row(trainer: Trainer, run_dir: Path) -> dict:
    """Train (or resume) the row whose run is `run_dir` -> {"steps", "final_loss", "train_wall_s"}; the final loss
    is the whole log's last (a resumed run's too). `TrainingStopped` propagates."""
    started = time.monotonic()
    fit = trainer.fit(resume=True)
    losses = [r["loss"] for r in MetricsLog(run_dir / "metrics.jsonl").records() if "loss" in r]
    return {
        "steps": fit.step,
        "final_loss": losses[-1] if losses else None,
        "train_wall_s": round(time.monotonic() - started, 2),
    }
