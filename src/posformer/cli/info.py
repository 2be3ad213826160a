"""`posformer info`: a model's layers, parameters, position encoding and FLOPs per token, from a preset or config."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.presets import preset_names
from posformer.utils.options import option


@dataclass
class InfoOptions:
    """The options of `posformer info`: exactly one of preset and config."""

    preset: str | None = option(None, "a named configuration", choices=preset_names())
    config: str | None = option(None, "a config file (.json, .yaml) written by Config.save")
    context: int | None = option(None, "context length for the FLOPs count (default: max_positions)", minimum=1)


def cmd_info(args: argparse.Namespace) -> int:
    from posformer.config import Config
    from posformer.summary import describe

    options = options_from_args(InfoOptions, args)
    if (options.preset is None) == (options.config is None):
        raise SystemExit("posformer info: give exactly one of --preset NAME or --config FILE")
    cfg = Config.preset(options.preset) if options.preset else Config.load(options.config)
    print(describe(cfg, options.context))
    return 0


COMMAND = Command(
    "info",
    help="summarise a model: layers, parameters, position encoding, FLOPs/token",
    description="Print a model's layers, parameters per component, position encoding and FLOPs per token. "
    "Nothing is allocated, so large presets are fine.",
    add_arguments=lambda parser: add_option_flags(parser, InfoOptions),
    run=cmd_info,
)
