"""`posformer train`: a causal language model on text files, with posformer's Trainer."""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args, settings_help, yaml_value
from posformer.train.knobs import PRECISIONS
from posformer.train.settings import DEMO_MODEL, DataSettings, TrainerSettings
from posformer.utils.limits import MAX_SEED
from posformer.utils.options import option


@dataclass
class TrainCommandOptions:
    """The options of `posformer train`; the run's own settings are its config file and `--set` (`RunSettings`)."""

    config: str | None = option(None, "run config, YAML or JSON (default: the demo settings)")
    output_dir: str = option("runs/lm", "where checkpoints, metrics.jsonl, loss.png and run_config.yaml go")
    resume: bool = option(
        False, "continue from the newest valid checkpoint in --output-dir (falls back past corrupt ones)"
    )
    set: list[str] = option(
        default_factory=list,
        help="override one setting, e.g. trainer.steps=100, data.seq_len=64, model.position=alibi (repeatable; "
        "values are YAML)",
        metavar="SECTION.KEY=VALUE",
        repeatable=True,
    )
    seed: int | None = option(
        None, "the run's one seed: weights, data order, dropout (= --set trainer.seed=N)", minimum=0, maximum=MAX_SEED
    )
    precision: str | None = option(
        None,
        "fp32, bf16 / fp16 autocast over float32 weights, or auto: bf16 where the CPU or GPU has bf16 units, else "
        "fp32; the run records what it used (= --set trainer.precision=X; default: the config's, fp32)",
        choices=PRECISIONS,
    )
    progress: bool = option(True, "no progress bar", flag="--no-progress")


def cmd_train(args: argparse.Namespace) -> int:
    from posformer.tasks.causal_lm import train_causal_lm
    from posformer.train import distributed
    from posformer.train.interrupt import Terminated
    from posformer.train.settings import load_run_settings

    options = options_from_args(TrainCommandOptions, args)
    overrides = options.set + ([f"trainer.seed={options.seed}"] if options.seed is not None else [])
    overrides += [f"trainer.precision={options.precision}"] if options.precision is not None else []
    settings = load_run_settings(options.config, overrides)
    try:
        train_causal_lm(settings, options.output_dir, resume=options.resume, progress=options.progress)
    except Terminated as stop:  # SIGTERM, checkpoint written: status 143, a torchrun worker without finalization
        distributed.shutdown(completed=False)
        distributed.exit_worker(stop.code)
        raise
    except BaseException:
        distributed.shutdown(completed=False)
        raise
    distributed.shutdown()
    distributed.exit_worker(0)
    return 0


HELP_WIDTH = 100
DESCRIPTION = textwrap.fill(
    "Train a causal language model with posformer's trainer: AdamW, warm-up schedules, gradient accumulation and "
    "clipping, bf16/fp16, evaluation, a JSONL log, a loss-curve PNG, and atomic checksummed checkpoints that "
    "--resume continues exactly. The run config (YAML) has three sections, model (Config fields or preset), data "
    "and trainer, each setting listed below; --set overrides any of them. Runs unchanged under `torchrun "
    "--nproc_per_node N` (DDP; trainer.parallel=fsdp shards the model). With no options it trains the demo on the "
    "shipped Tiny Shakespeare sample.",
    HELP_WIDTH,
)
MODEL_SECTION = textwrap.fill(
    "model.KEY  any Config field (position, d_model, n_layers, n_heads, norm, activation, ...: `posformer.Config`), "
    "or model.preset=NAME with fields that override the preset's; vocab_size comes from the tokenizer (default: the "
    f"demo model, {', '.join(f'{key}={yaml_value(value)}' for key, value in DEMO_MODEL.items())})",
    HELP_WIDTH,
    initial_indent="  ",
    subsequent_indent="      ",
)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's flags, then the run's settings, each section a group of its own (`--set SECTION.KEY=VALUE`)."""
    add_option_flags(parser, TrainCommandOptions)
    parser.add_argument_group("run settings: model (--set model.KEY=VALUE)", MODEL_SECTION)
    for section, settings in (("data", DataSettings), ("trainer", TrainerSettings)):
        title = f"run settings: {section} (--set {section}.KEY=VALUE)"
        parser.add_argument_group(title, settings_help(settings, f"{section}.", HELP_WIDTH))


COMMAND = Command(
    "train",
    help="train a causal LM on text files (default: the ~2 minute demo on the shipped sample)",
    description=DESCRIPTION,
    epilog="Example: posformer train --config run.yaml --output-dir runs/x --set trainer.lr=1e-3 "
    "--set model.position=alibi",
    formatter_class=argparse.RawDescriptionHelpFormatter,
    add_arguments=add_train_arguments,
    run=cmd_train,
)
