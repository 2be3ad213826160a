"""The training knobs every experiment hands to the Trainer, declared once: `posformer extrapolate` (its
language-model rows and its `--task` rows) and `posformer extend` inherit them, and `trainer_settings` turns them
into the `TrainerSettings` of a row (cosine schedule, one checkpoint kept, no sample)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from posformer.train.settings import DEVICES, PRECISIONS, TrainerSettings
from posformer.utils.options import option
from posformer.utils.validation import check_choice, check_int, check_number


@dataclass
class TrainingKnobs:
    """How each row trains. An experiment's presets set these; its own `validate` checks them (`check`)."""

    steps: int = option(500, "optimizer steps per row")
    batch_size: int = option(32, "sequences per step")
    lr: float = option(1e-3, "peak learning rate (cosine schedule with warm-up)")
    warmup: int = option(50, "linear warm-up steps (at most steps - 1)", flag=False)
    min_lr_ratio: float = option(0.1, "the cosine schedule ends at min_lr_ratio * lr", flag=False)
    weight_decay: float = option(0.1, "AdamW weight decay", flag=False)
    seed: int = option(0, "the one seed: initial weights, data order and every draw of the experiment")
    device: str = option("auto", "auto, cpu or cuda")
    threads: int | None = option(
        None, "torch CPU threads (null: torch's default); 1 is faster when other work shares the cores", flag=False
    )
    precision: str = option(
        "fp32",
        "fp32; bf16 or fp16 autocast over float32 weights; or auto: bf16 where the CPU or GPU has bf16 units, else "
        "fp32 (the run records what it used)",
    )
    save_every: int = option(100, "steps between a row's checkpoints (a stopped row resumes from the last)", flag=False)

    def check(self, prefix: str) -> None:
        """Raise `ValueError` named `{prefix}{knob}`: lr > 0, min_lr_ratio in [0, 1], weight_decay >= 0, warmup and
        seed >= 0, a device and precision, threads None or >= 1."""
        check_number(f"{prefix}lr", self.lr, 0.0, low_open=True)
        check_number(f"{prefix}min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        check_number(f"{prefix}weight_decay", self.weight_decay, 0.0)
        check_int(f"{prefix}warmup", self.warmup, minimum=0)
        check_int(f"{prefix}seed", self.seed, minimum=0)
        check_choice(f"{prefix}device", self.device, DEVICES)
        check_choice(f"{prefix}precision", self.precision, PRECISIONS)
        if self.threads is not None:
            check_int(f"{prefix}threads", self.threads)

    def with_precision_resolved(self):
        """A copy whose precision "auto" is resolved for its device (`train.precision.resolve_precision`)."""
        from posformer.train.distributed import resolve_device
        from posformer.train.precision import resolve_precision

        return dataclasses.replace(self, precision=resolve_precision(self.precision, resolve_device(self.device)))

    def trainer_settings(self, steps: int | None = None) -> TrainerSettings:
        """The Trainer settings of a row: these knobs, a cosine schedule, one checkpoint kept, no sample; `steps`
        replaces the knob (the steps of one LongRoPE stage)."""
        steps = self.steps if steps is None else steps
        every = min(self.save_every, steps)
        return TrainerSettings(
            steps=steps,
            batch_size=self.batch_size,
            lr=self.lr,
            min_lr_ratio=self.min_lr_ratio,
            schedule="cosine",
            warmup=min(self.warmup, steps - 1),
            weight_decay=self.weight_decay,
            precision=self.precision,
            device=self.device,
            eval_every=every,
            save_every=every,
            keep_last=1,
            log_every=10,
            seed=self.seed,
            sample_prompt=None,
            sample_tokens=0,
        )
