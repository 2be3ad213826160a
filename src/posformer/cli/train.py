"""`posformer train`: a causal language model on text files, with posformer's Trainer."""

from __future__ import annotations

import argparse

from posformer.cli.arg_types import non_negative_int
from posformer.cli.command import Command


def cmd_train(args: argparse.Namespace) -> int:
    from posformer.tasks.causal_lm import train_causal_lm
    from posformer.train import distributed
    from posformer.train.settings import load_run_settings

    overrides = args.set + ([f"trainer.seed={args.seed}"] if args.seed is not None else [])
    settings = load_run_settings(args.config, overrides)
    try:
        train_causal_lm(settings, args.output_dir, resume=args.resume, progress=not args.no_progress)
    except BaseException:
        distributed.shutdown(completed=False)
        raise
    distributed.shutdown()
    distributed.exit_worker(0)
    return 0


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="run config, YAML or JSON (default: the demo settings)")
    parser.add_argument(
        "--output-dir",
        dest="output_dir",
        default="runs/lm",
        help="where checkpoints, metrics.jsonl, loss.png and run_config.yaml go (default: runs/lm)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest valid checkpoint in --output-dir (falls back past corrupt ones)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one setting, e.g. trainer.steps=100, data.seq_len=64, model.position=alibi "
        "(repeatable; values are YAML)",
    )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        help="the run's one seed: weights, data order, dropout (= --set trainer.seed=N)",
    )
    parser.add_argument("--no-progress", dest="no_progress", action="store_true", help="no progress bar")


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
    add_arguments=add_train_arguments,
    run=cmd_train,
)
