"""The knobs of `posformer extrapolate --task`, its presets (quick, cpu) and the model every row shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posformer import positions
from posformer.config import Config
from posformer.experiments.presets import from_preset
from posformer.experiments.row_knobs import RowKnobs
from posformer.experiments.synthetic.generators import TASKS, VOCAB, min_length
from posformer.experiments.training_knobs import TrainingKnobs
from posformer.utils.limits import MAX_EXAMPLES
from posformer.utils.options import option
from posformer.utils.validation import check_choice, check_field_kinds, check_int, fail, is_int

# Kazemnejad et al. 2023 compare these five (APE as the sinusoidal embedding)
DEFAULT_ROWS = ["none", "t5", "alibi", "rope", "sinusoidal"]

PRESETS: dict[str, dict[str, Any]] = {  # each: what differs from the defaults
    # a smoke run: about 10 s a row on one CPU thread (copy: rope learns n=8 to ~0.9 exact match)
    "quick": dict(warmup=25, layers=2, eval_examples=64),
    # the quick preset's lengths, twice the depth, six times the steps and 200 examples a length (a standard
    # error of at most 0.035): about 2 minutes a row on one thread, 10 a task
    "cpu": dict(steps=3000, warmup=100),
}


@dataclass
class TaskSettings(RowKnobs, TrainingKnobs):
    """Every knob of a task run, set by a preset, a flag of `posformer extrapolate --task` or `--set KNOB=VALUE`; the
    rows, the model's shape and the training knobs are the shared groups' (train_len and eval_lens count the task's
    symbols: training examples have sizes 1..L; the default eval_lens are L times 1, 1.25, 1.5, 2, 3 and 4, just past
    L, where exact match first falls, and far)."""

    positions: list[str] = field(default_factory=lambda: list(DEFAULT_ROWS))
    train_len: int = 8  # the defaults of a task run, where the shared groups' suit language models
    d_model: int = 64
    lr: float = 3e-3
    save_every: int = 500
    threads: int | None = 1
    task: str = option("copy", "the synthetic task", choices=tuple(TASKS))
    eval_examples: int = option(200, "held-out examples per eval size", minimum=1, maximum=MAX_EXAMPLES)

    def __post_init__(self) -> None:
        if self.eval_lens is None and is_int(self.train_len):  # else validate() names train_len
            self.eval_lens = sorted({round(k * self.train_len) for k in (1, 1.25, 1.5, 2, 3, 4)})
        self.validate()

    def validate(self) -> None:
        check_choice("task", self.task, tuple(TASKS))
        if not isinstance(self.positions, list) or not self.positions:
            fail("positions", self.positions, "a non-empty list of registered encodings")
        for name in self.positions:
            check_choice("positions", name, tuple(positions.usable("decoder")))
        check_int("train_len", self.train_len, minimum=min_length(self.task))
        if not isinstance(self.eval_lens, list) or not self.eval_lens:
            fail("eval_lens", self.eval_lens, "a non-empty list of task lengths")
        for n in self.eval_lens:
            check_int("eval_lens", n, minimum=min_length(self.task))
        if not isinstance(self.position_params, dict) or any(r not in self.positions for r in self.position_params):
            fail("position_params", self.position_params, "a mapping {row: {param: value}} over the rows run")
        self.check("")
        if self.d_model % self.heads:
            fail("heads", self.heads, f"a divisor of d_model={self.d_model}")
        check_field_kinds(self, "")

    @classmethod
    def preset(cls, name: str, /, **overrides: Any) -> "TaskSettings":
        return from_preset(cls, PRESETS, name, overrides, "extrapolate --task")


def model_config(s: TaskSettings, position: str, longest: int) -> Config:
    """The decoder of one row: pre-norm RMSNorm, SwiGLU, no biases, tied embeddings; only `position` differs.
    `longest`: the longest sequence (prompt, SEP, target, EOS) it will read. Token embeddings are not scaled by
    sqrt(d_model): on copy (cpu preset) scaling let the sinusoidal row learn but left none and t5 at 0 exact
    match and no row generalising (docs/tasks.md)."""
    return s.row_config(position, len(VOCAB), longest, 4 * s.d_model)
