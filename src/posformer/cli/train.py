"""`posformer train`: a causal language model on text files, with posformer's Trainer."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.train.precision import PRECISIONS
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


COMMAND = Command(
    "train",
    help="train a causal LM on text files (default: the ~2 minute demo on the shipped sample)",
    description="Train a causal language model with posformer's trainer: AdamW, warm-up schedules, gradient "
    "accumulation and clipping, bf16/fp16, evaluation, a JSONL log, a loss-curve PNG, and "
    "atomic checksummed checkpoints that --resume continues exactly. The run config (YAML) has "
    "three sections, model (Config fields or preset), data and trainer; --set overrides any "
    "field. Runs unchanged under `torchrun --nproc_per_node N` (DDP; trainer.parallel=fsdp "
    "shards the model). With no options it trains the demo on the shipped Tiny Shakespeare sample.",
    epilog="Example: posformer train --config run.yaml --output-dir runs/x --set trainer.lr=1e-3 "
    "--set model.position=alibi",
    add_arguments=lambda parser: add_option_flags(parser, TrainCommandOptions),
    run=cmd_train,
)
