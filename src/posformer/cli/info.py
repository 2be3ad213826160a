"""`posformer info`: a model's layers, parameters, position encoding and FLOPs per token, from a model (a run,
a checkpoint, a model dir, a Hugging Face dir or Hub id), a preset or a config file."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.presets import preset_names
from posformer.utils.limits import MAX_LENGTH
from posformer.utils.options import option


@dataclass
class InfoOptions:
    """The options of `posformer info`: exactly one of model, preset and config."""

    model: str | None = option(
        None,
        "a training run, checkpoint folder, model dir, Hugging Face dir or Hub id (its config alone is read)",
        flag="MODEL",
    )
    preset: str | None = option(None, "a named configuration", choices=preset_names())
    config: str | None = option(None, "a config file (.json, .yaml) written by Config.save")
    context: int | None = option(
        None, "context length for the FLOPs count (default: max_positions)", minimum=1, maximum=MAX_LENGTH
    )


def cmd_info(args: argparse.Namespace) -> int:
    from posformer.config import Config
    from posformer.summary import describe

    options = options_from_args(InfoOptions, args)
    given = [name for name in ("model", "preset", "config") if getattr(options, name) is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of MODEL, --preset NAME or --config FILE")
    if options.model is not None:
        from posformer.loading import load_config

        cfg, directory = load_config(options.model)
        print(f"{options.model}: {directory}")
    elif options.preset:
        cfg = Config.preset(options.preset)
    else:
        from posformer.utils.file_limits import not_blank

        cfg = Config.load(not_blank(options.config, "--config"))
    print(describe(cfg, options.context))
    return 0


COMMAND = Command(
    "info",
    help="summarise a model: layers, parameters, position encoding, FLOPs/token",
    description="Print a model's layers, parameters per component, position encoding and FLOPs per token, for "
    "a trained model (a run dir stands for its newest valid checkpoint), a Hugging Face model, a preset or a "
    "config file. Only the config is read and nothing is allocated, so large models are fine.",
    add_arguments=lambda parser: add_option_flags(parser, InfoOptions),
    run=cmd_info,
)
