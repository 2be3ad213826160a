"""What `posformer extrapolate` and `posformer extend` share on their command line besides the experiment's knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from posformer.utils.options import option


@dataclass(kw_only=True)
class ExperimentRunOptions:
    """`--set KNOB=VALUE` and `--no-progress`; each experiment's command adds its own options."""

    options_group: ClassVar[str] = "overrides and progress"

    set: list[str] = option(
        default_factory=list,
        help="override any knob, those with a flag too (steps=200); values are YAML (repeatable)",
        metavar="KNOB=VALUE",
        repeatable=True,
    )
    progress: bool = option(True, "no progress bars", flag="--no-progress")
