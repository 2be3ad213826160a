"""The knobs every training run sets, declared once with their ranges and choices (`utils.options.option`):
`TrainerSettings` takes them, and so do the experiments' `TrainingKnobs`, with defaults of their own."""

from __future__ import annotations

from dataclasses import dataclass

from posformer.utils.limits import MAX_BATCH, MAX_SEED, MAX_STEPS
from posformer.utils.options import option

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # what `train.precision` computes in; declared here, without torch


@dataclass
class OptimizerKnobs:
    """Steps, batch, learning-rate schedule, weight decay, seed, device and precision of a training run."""

    steps: int = option(500, "optimizer steps", minimum=1, maximum=MAX_STEPS)
    batch_size: int = option(32, "sequences per step", minimum=1, maximum=MAX_BATCH)
    lr: float = option(3e-3, "peak learning rate (after the linear warm-up)", low=0.0, low_open=True)
    warmup: int = option(50, "linear warm-up steps (at most steps - 1)", flag=False, minimum=0, maximum=MAX_STEPS)
    min_lr_ratio: float = option(0.1, "the schedule ends at min_lr_ratio * lr", flag=False, low=0.0, high=1.0)
    weight_decay: float = option(0.1, "AdamW weight decay", flag=False, low=0.0)
    seed: int = option(
        0, "the one seed: initial weights, data order and every draw of the run", minimum=0, maximum=MAX_SEED
    )
    device: str = option("auto", "auto, cpu or cuda", choices=DEVICES)
    precision: str = option(
        "fp32",
        "fp32; bf16 or fp16 autocast over float32 weights; or auto: bf16 where the CPU or GPU has bf16 units, else "
        "fp32 (the run records what it used)",
        choices=PRECISIONS,
    )
