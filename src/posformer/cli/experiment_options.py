"""What `posformer extrapolate` and `posformer extend` share on their command line besides the experiment's knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from posformer.utils.options import option


@dataclass(kw_only=True)
class ExperimentRunOptions:
    """`--set KNOB=VALUE`, `--seeds` and `--no-progress`; each experiment's command adds its own options."""

    options_group: ClassVar[str] = "overrides and progress"

    set: list[str] = option(
        default_factory=list,
        help="override any knob, those with a flag too (steps=200); values are YAML (repeatable)",
        metavar="KNOB=VALUE",
        repeatable=True,
    )
    seeds: str | None = option(
        None,
        "run the whole experiment once per seed, each into OUTPUT/seed-S/, and report every measure as its mean "
        "over seeds with a 95% interval: N (the seeds --seed .. --seed + N - 1) or a list (0,1,2)",
        metavar="N|S,S,...",
    )
    progress: bool = option(True, "no progress bars", flag="--no-progress")
