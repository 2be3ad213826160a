"""`posformer bench`: the speed benchmarks, each declared once; `--generation`, `--trainer`, `--qa`,
`--positions` or `--mlm` picks one.

Every benchmark's flags come from its options dataclass (`posformer.cli.benchmark`); it prints its report and,
with `--json PATH`, writes its results there. A missing optional package (ImportError) exits with 1 and its
message; a bad option value (ValueError) is reported as a usage error of the benchmark's own parser.
"""

from __future__ import annotations

import argparse
import sys

from posformer.cli.bench_models import GENERATION, MEMORY, POSITIONS, SPEED
from posformer.cli.bench_training import MLM, QA, TRAINER
from posformer.cli.benchmark import BENCH_PROG
from posformer.cli.command import Command, standalone_parser

# no flag: SPEED
BENCHMARKS = {
    "--generation": GENERATION,
    "--trainer": TRAINER,
    "--qa": QA,
    "--positions": POSITIONS,
    "--memory": MEMORY,
    "--mlm": MLM,
}


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark that `args.rest` picks, parsed by that benchmark's own parser."""
    chosen = [flag for flag in BENCHMARKS if flag in args.rest]
    if len(chosen) > 1:
        raise ValueError(f"give at most one of {' and '.join(BENCHMARKS)}")
    benchmark = BENCHMARKS[chosen[0]] if chosen else SPEED
    parser = standalone_parser(benchmark, prog=" ".join([BENCH_PROG, *chosen]))
    options = parser.parse_args([arg for arg in args.rest if arg not in chosen])
    try:
        return options.run(options)
    except ImportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:
        parser.error(str(err))


COMMAND = Command(
    "bench",
    help="speed benchmark against Hugging Face (run `posformer bench --help`; "
    "`posformer bench --generation --help` for generation speed, "
    "`posformer bench --trainer --help` for the trainer's, "
    "`posformer bench --qa --help` for extractive QA training, "
    "`posformer bench --positions --help` for the cost of each position encoding, "
    "`posformer bench --memory --help` for its memory by length, "
    "`posformer bench --mlm --help` for masked-LM training)",
    run=cmd_bench,
    passes_on=True,
)
