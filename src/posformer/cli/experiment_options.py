"""What `posformer extrapolate` and `posformer extend` share on their command line besides the experiment's knobs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

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
        "over seeds with a 95% interval: N (the seeds --seed .. --seed + N - 1) or a list (0,1,2; one seed: 2,)",
        metavar="N|S,S,...",
    )
    progress: bool = option(True, "no progress bars", flag="--no-progress")


def add_experiment_arguments(parser: argparse.ArgumentParser, command: type, settings: type, examples: str) -> None:
    """The flags of `command` (how the experiment runs), then one flag per knob of `settings` that has one (unset:
    the preset's; ranges and choices checked with the settings), then the knobs without a flag, listed with
    `examples` of `--set`."""
    from posformer.cli.option_flags import add_option_flags, set_only_help
    from posformer.utils.options import options

    add_option_flags(parser, command)
    unset = {opt.name: None for opt in options(settings)}
    knobs = parser.add_argument_group("knobs, each its preset's unless given (also: --set KNOB=VALUE)")
    add_option_flags(knobs, settings, defaults=unset, checked=False, unset="the preset's", listed=False)
    parser.add_argument_group("knobs without a flag (--set KNOB=VALUE)", f"{set_only_help(settings)}\n  {examples}")


def run_seeds(
    args: argparse.Namespace,
    settings: Any,
    root: Path,
    run_one: Callable[[Any, Path], dict],
    markdown: Callable[[dict], str],
    benchmark: str,
) -> int:
    """--seeds: `run_one(settings with seed S, ROOT/seed-S)` for each seed (`seeds.runs.run_over_seeds`), then
    the tables over seeds, printed; the exit status."""
    from posformer.experiments.seeds.runs import parse_seeds, run_over_seeds

    record = run_over_seeds(settings, root, parse_seeds(args.seeds, settings.seed), run_one, markdown, benchmark)
    print("\n" + markdown(record))
    print(f"written: {root / 'results.md'}, {root / 'results.json'}, and each seed's run in {root}/seed-S/")
    return 0
