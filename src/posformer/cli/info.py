"""`posformer info`: a model's layers, parameters, position encoding and FLOPs per token, from a preset or config."""

from __future__ import annotations

import argparse

from posformer.cli.arg_types import positive_int
from posformer.cli.command import Command
from posformer.presets import preset_names


def cmd_info(args: argparse.Namespace) -> int:
    from posformer.config import Config
    from posformer.summary import describe

    if (args.preset is None) == (args.config is None):
        raise SystemExit("posformer info: give exactly one of --preset NAME or --config FILE")
    cfg = Config.preset(args.preset) if args.preset else Config.load(args.config)
    print(describe(cfg, args.context))
    return 0


def add_info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=preset_names(), help="a named configuration")
    parser.add_argument("--config", help="a config file (.json, .yaml) written by Config.save")
    parser.add_argument(
        "--context", type=positive_int, help="context length for the FLOPs count (default: max_positions)"
    )


COMMAND = Command(
    "info",
    help="summarise a model: layers, parameters, position encoding, FLOPs/token",
    description="Print a model's layers, parameters per component, position encoding and FLOPs per token. "
    "Nothing is allocated, so large presets are fine.",
    add_arguments=add_info_arguments,
    run=cmd_info,
)
