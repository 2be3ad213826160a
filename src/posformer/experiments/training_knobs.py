"""The training knobs every experiment hands to the Trainer, declared once with their ranges: `posformer
extrapolate` (its language-model rows and its `--task` rows) and `posformer extend` inherit them, `check` checks
them (and every other declared range and choice of the experiment's settings), and `trainer_settings` turns them
into the `TrainerSettings` of a row (cosine schedule, one checkpoint kept, no sample)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from posformer.train.knobs import OptimizerKnobs
from posformer.train.settings import TrainerSettings
from posformer.utils.limits import MAX_STEPS, MAX_THREADS
from posformer.utils.options import check_options, option


@dataclass
class TrainingKnobs(OptimizerKnobs):
    """How each row trains: the knobs of every run (`train.knobs.OptimizerKnobs`, their ranges declared there; a
    lower peak lr here), threads and the checkpoint interval. An experiment's presets set these; its own
    `validate` checks them (`check`)."""

    lr: float = 1e-3
    threads: int | None = option(
        None,
        "torch CPU threads (null: torch's default); 1 is faster when other work shares the cores",
        flag=False,
        minimum=1,
        maximum=MAX_THREADS,
    )
    save_every: int = option(
        100,
        "steps between a row's checkpoints (a stopped row resumes from the last)",
        flag=False,
        minimum=1,
        maximum=MAX_STEPS,
    )

    def check(self, prefix: str) -> None:
        """Raise `ValueError` named `{prefix}{knob}` for the first knob outside its declared range or choices
        (`utils.options.check_options`): these (lr > 0, min_lr_ratio in [0, 1], weight_decay >= 0, warmup and
        seed >= 0, a device and precision, threads None or >= 1, steps, batch_size and save_every >= 1) and the
        experiment's own."""
        check_options(self, prefix)

    def to_dict(self) -> dict[str, Any]:
        """Every knob of the experiment's settings, as results.json's config and a row's run_config.yaml hold them."""
        return dataclasses.asdict(self)

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
