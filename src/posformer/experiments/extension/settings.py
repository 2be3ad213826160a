"""The knobs of `posformer extend` and its presets (quick, cpu)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posformer.experiments.extension.methods import METHODS
from posformer.experiments.longeval.task_names import TASK_NAMES
from posformer.experiments.presets import from_preset
from posformer.experiments.training_knobs import TrainingKnobs
from posformer.utils.limits import MAX_BATCH, MAX_BATCH_TOKENS, MAX_LENGTH, MAX_REPEATS, MAX_STEPS, MAX_TOKENS
from posformer.utils.options import option
from posformer.utils.validation import check_field_kinds, check_int, fail

PRESETS: dict[str, dict[str, Any]] = {  # each: what differs from the defaults
    # a smoke run of a tiny model: seconds
    "quick": dict(
        steps=10,
        batch_size=4,
        warmup=2,
        eval_tokens=4096,
        eval_batch_tokens=4096,
        passkey_depths=[0.0, 0.5, 1.0],
        passkey_trials=4,
        suite_tasks=["single_noise", "vt"],
        suite_trials=2,
        longrope_population=4,
        longrope_generations=2,
        longrope_tokens=4096,
        save_every=10,
        threads=1,
    ),
    # the `extrapolate --preset bytes` rope row to 8L: about a minute of fine-tuning per method on 2 idle cores
    "cpu": dict(threads=2),
}


@dataclass
class ExtendSettings(TrainingKnobs):
    """Every knob of `posformer extend`, set by a preset, its flag (those declared with one) or `--set KNOB=VALUE`.
    LongRoPE's progressive extension (Ding et al. 2024, section 3.3) is `longrope_stages`: lengths between
    train_len and target_len, each searched and fine-tuned before the next (the stages share 40% of the steps, as
    the paper's 400 of 1000; the target takes the rest)."""

    target_len: int | None = option(
        None, "the length to extend to (required, no default)", minimum=2, maximum=MAX_LENGTH
    )
    methods: list[str] = option(
        default_factory=lambda: list(METHODS),
        help=f"comma-separated methods (default: {','.join(METHODS)}); --method: one",
        aliases=("--method",),
        metavar="METHOD",
        choices=METHODS,
    )
    steps: int = option(
        200,
        "fine-tuning steps at target_len of the methods that are fine-tuned, the RoPE scalings, and DroPE's "
        "recalibration steps at train_len (0: eval-time only, nothing trained)",
        minimum=0,
        maximum=MAX_STEPS,
    )
    batch_size: int = option(
        8,
        "sequences of target_len tokens per step (DroPE: the same tokens as windows of train_len)",
        minimum=1,
        maximum=MAX_BATCH,
    )
    passkey_fraction: float = option(
        0.0,
        "fraction of the fine-tuning windows replaced by passkey prompts of the fine-tuning length (0: text alone, "
        "as the papers; a source trained with extrapolate's passkey_fraction can keep its own mix)",
        flag=False,
        low=0.0,
        high=1.0,
    )
    lr: float = option(3e-4, "peak fine-tuning learning rate (cosine schedule with warm-up)", low=0.0, low_open=True)
    warmup: int = 20
    train_len: int | None = option(
        None, "the length the run was trained at (default: from its run_config.yaml)", minimum=2, maximum=MAX_LENGTH
    )
    text: str | None = option(
        None, "a text file to fine-tune on (first 90%) and evaluate on (last 10%) (default: the run's own corpus)"
    )
    eval_lens: list[int] | None = option(
        None,
        "lengths to evaluate (default: train_len times 1, 2, 4, ... up to target_len, and 2 target_len)",
        flag=False,
        minimum=2,
        maximum=MAX_LENGTH,
    )
    eval_tokens: int = option(
        98_304, "held-out tokens scored at every length", flag=False, minimum=1, maximum=MAX_TOKENS
    )
    eval_batch_tokens: int = option(
        8192, "tokens per evaluation batch", flag=False, minimum=1, maximum=MAX_BATCH_TOKENS
    )
    passkey_lengths: list[int] | None = option(
        None, "passkey grid lengths (default: eval_lens)", flag=False, minimum=2, maximum=MAX_LENGTH
    )
    passkey_depths: list[float] = option(
        default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0],
        help="passkey grid depths, from 0 (start) to 1 (end)",
        flag=False,
        low=0.0,
        high=1.0,
    )
    passkey_trials: int = option(20, "passkey keys per grid cell", flag=False, minimum=1, maximum=MAX_REPEATS)
    suite_tasks: list[str] = option(
        default_factory=lambda: list(TASK_NAMES),
        help="long-context suite tasks (`posformer longeval`) scored at the passkey lengths and depths ([]: none)",
        flag=False,
        choices=tuple(TASK_NAMES),
    )
    suite_trials: int = option(
        10, "suite prompts per task, length and depth", flag=False, minimum=1, maximum=MAX_REPEATS
    )
    suite_threshold: float = option(
        0.5,
        "effective length: the fraction of the source's mean suite score at train_len a length must exceed",
        flag=False,
        low=0.0,
        high=1.0,
        low_open=True,
    )
    longrope_population: int = option(
        8, "LongRoPE search: candidates per generation", flag=False, minimum=1, maximum=MAX_REPEATS
    )
    longrope_generations: int = option(4, "LongRoPE search: generations", flag=False, minimum=1, maximum=MAX_REPEATS)
    longrope_tokens: int = option(
        16_384, "LongRoPE search: training tokens scoring each candidate", flag=False, minimum=1, maximum=MAX_TOKENS
    )
    longrope_stages: list[int] = option(
        default_factory=list,
        help="LongRoPE: lengths searched and fine-tuned before the target",
        flag=False,
        minimum=2,
        maximum=MAX_LENGTH,
    )
    longrope_short: bool = option(
        False,
        "LongRoPE: after the fine-tune, search the short factors that restore the perplexity at train_len (the "
        "paper's readjustment)",
        flag=False,
    )

    @classmethod
    def preset(cls, name: str, /, **overrides: Any) -> "ExtendSettings":
        return from_preset(cls, PRESETS, name, overrides, "extend")

    def resolve(self, train_len: int) -> "ExtendSettings":
        """Fill train_len, eval_lens and passkey_lengths from the run's training length; validate everything."""
        if self.train_len is None:
            self.train_len = train_len
        check_int("extend: train_len", self.train_len, minimum=2)
        check_int("extend: target_len", self.target_len, minimum=self.train_len + 1)
        if self.eval_lens is None:
            self.eval_lens, n = [], self.train_len
            while n < self.target_len:
                self.eval_lens.append(n)
                n *= 2
            self.eval_lens += [self.target_len, 2 * self.target_len]
        if self.passkey_lengths is None:
            self.passkey_lengths = list(self.eval_lens)
        self.validate()
        return self

    def validate(self) -> None:
        """Raise ValueError naming the first bad knob: `extend: KNOB=VALUE is invalid: expected ...`."""
        if isinstance(self.methods, str):
            self.methods = [m.strip() for m in self.methods.split(",") if m.strip()]
        if not isinstance(self.methods, list) or not self.methods or len(set(self.methods)) != len(self.methods):
            fail("extend: methods", self.methods, f"a non-empty list of distinct methods from {', '.join(METHODS)}")
        for name in ("eval_lens", "passkey_lengths"):
            value = getattr(self, name)
            if not isinstance(value, list) or not value:
                fail(f"extend: {name}", value, "a non-empty list of lengths")
            for n in value:
                check_int(f"extend: {name}", n, minimum=2)
            setattr(self, name, sorted(set(value)))
        if self.train_len not in self.eval_lens:
            fail("extend: eval_lens", self.eval_lens, f"a list that includes train_len={self.train_len}")
        if not isinstance(self.passkey_depths, list) or not self.passkey_depths:
            fail("extend: passkey_depths", self.passkey_depths, "a non-empty list of numbers in [0, 1]")
        if not isinstance(self.suite_tasks, list) or len(set(self.suite_tasks)) != len(self.suite_tasks):
            fail("extend: suite_tasks", self.suite_tasks, f"a list of distinct tasks from {', '.join(TASK_NAMES)}")
        self.check("extend: ")
        self._check_stages()
        check_field_kinds(self, "extend: ")

    def _check_stages(self) -> None:
        stages, expected = self.longrope_stages, "an increasing list of lengths between train_len and target_len"
        if not isinstance(stages, list):
            fail("extend: longrope_stages", stages, expected)
        for n in stages:
            check_int("extend: longrope_stages", n, minimum=self.train_len + 1)
        if sorted(set(stages)) != stages or any(n >= self.target_len for n in stages):
            fail("extend: longrope_stages", stages, expected)
        if stages and "longrope" in self.methods and 0 < self.steps < 2 * len(stages) + 1:
            fail("extend: steps", self.steps, f"at least {2 * len(stages) + 1} with {len(stages)} LongRoPE stages")

    def recalibration_batch(self) -> int:
        """DroPE's windows of train_len a step: as many tokens as a fine-tuning step's batch_size x target_len
        (rounded, at least 1), so that its recalibration and the fine-tunes read the same number of tokens."""
        return max(1, round(self.batch_size * self.target_len / self.train_len))

    def stage_steps(self) -> list[int]:
        """The fine-tuning steps of each LongRoPE stage, then of the target: the stages share 40% of `steps`
        (without stages the target takes them all)."""
        n = len(self.longrope_stages)
        stages = [max(1, round(0.4 * self.steps / n))] * n if n else []
        return stages + [self.steps - sum(stages)]
