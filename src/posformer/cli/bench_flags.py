"""What every `posformer bench` benchmark shares: its help layout, the run, runtime and model-size flags, and
the report it prints and writes."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from posformer.checkpoints.atomic import write_json_atomic
from posformer.cli.arg_types import non_negative_int, positive_int

BENCH_PROG = "posformer bench"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option; the description and epilog kept as written."""


def report(args: argparse.Namespace, result: dict[str, Any], format_report: Callable[[dict[str, Any]], str]) -> int:
    """Print the benchmark's report and write `--json`; returns the exit status."""
    print(format_report(result))
    if args.json:
        write_json_atomic(args.json, result)
        print(f"results written to {args.json}")
    return 0


def threads_default() -> int:
    import torch

    return torch.get_num_threads()


def add_run_flags(
    parser: argparse.ArgumentParser, threads: int, compared: str, bars: str = "the progress bars"
) -> None:
    """--threads, --json and --no-progress: the flags every benchmark shares."""
    add = parser.add_argument
    add("--threads", type=positive_int, default=threads, help=f"torch.set_num_threads for {compared}")
    add("--json", metavar="PATH", help="also write the results as JSON to PATH (written atomically)")
    add("--no-progress", action="store_true", help=f"hide {bars}")


def add_runtime_flags(parser: argparse.ArgumentParser) -> None:
    """--device and --precision: where the models run and in what."""
    add = parser.add_argument
    add(
        "--device",
        default="cpu",
        help="where every model runs: cpu, cuda or cuda:N (timed after torch.cuda.synchronize)",
    )
    add(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="fp32, or bf16 autocast over float32 weights (as trainer.precision=bf16)",
    )


def add_llama_model_arguments(
    parser: argparse.ArgumentParser, batch: int, layers: int, layers_help: str, compared: str
) -> None:
    """The sizes of a llama-preset benchmark model, its timed iterations and the shared run flags."""
    add = parser.add_argument
    add("--batch", type=positive_int, default=batch, help="sequences per iteration")
    add("--length", type=positive_int, default=512, help="tokens per sequence")
    add("--d-model", type=positive_int, default=512, help="hidden size (d_model / hidden_size)")
    add("--layers", type=positive_int, default=layers, help=layers_help)
    add("--heads", type=positive_int, default=8, help="attention heads (key/value heads are the same number)")
    add("--vocab", type=positive_int, default=8192, help="vocabulary size")
    add("--d-ff", type=positive_int, default=1376, help="SwiGLU inner size (d_ff / intermediate_size)")
    add("--warmup", type=non_negative_int, default=1, help="untimed iterations per model before timing, per phase")
    add("--iters", type=positive_int, default=3, help="timed iterations per model, per phase; the median is reported")
    add("--skip-train", action="store_true", help="measure the forward pass only")
    add_runtime_flags(parser)
    add_run_flags(parser, threads_default(), compared)
