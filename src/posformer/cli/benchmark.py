"""One `posformer bench` benchmark declared as a `Command`: its flags come from the benchmark's options dataclass,
and running it prints the report and writes `--json`.

    SPEED = benchmark("speed", "posformer.bench.speed", "posformer.bench.benchmark_options.SpeedOptions",
                      help=..., description=..., epilog=...)

The benchmark module gives `run(options) -> result` and `format_report(result) -> str`; it is imported when the
benchmark runs, not when `posformer` starts. Its options dataclass lives in a module without torch, imported when
the benchmark's parser is built, so that `posformer bench [--BENCHMARK] --help` imports no model code.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Any

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.utils.safe_write import write_json_atomic

BENCH_PROG = "posformer bench"


@dataclass(frozen=True)
class Benchmark:
    """What runs one benchmark: its module, imported when it runs, and the dotted path of its options dataclass
    (`posformer.bench.benchmark_options.SpeedOptions`), imported when its parser is built."""

    module: str
    options_path: str

    def options(self) -> type:
        module, _, name = self.options_path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_option_flags(parser, self.options())

    def __call__(self, args: argparse.Namespace) -> int:
        code = importlib.import_module(self.module)
        options = options_from_args(self.options(), args)
        return report(options.json, code.run(options), code.format_report)


def benchmark(name: str, module: str, options_path: str, help: str, description: str, epilog: str) -> Command:
    """The `Command` of the benchmark in `module` whose options are the dataclass at `options_path`."""
    run = Benchmark(module, options_path)
    return Command(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_arguments=run.add_arguments,
        run=run,
    )


def report(json_path: str | None, result: dict[str, Any], format_report: Any) -> int:
    """Print the benchmark's report and write it to `json_path` (when given); returns the exit status."""
    print(format_report(result))
    if json_path:
        write_json_atomic(json_path, result)
        print(f"results written to {json_path}")
    return 0
