"""What every benchmark's command line shares: the help layout and `main`'s flow (report, then `--json`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from posformer.atomic import write_json_atomic


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option; the description and epilog kept as written."""


def run_cli(parser: argparse.ArgumentParser, argv: list[str] | None,
            run: Callable[[argparse.Namespace], dict[str, Any]],
            report: Callable[[dict[str, Any]], str]) -> int:
    """Parse `argv`, run the benchmark, print its report and write `--json`; returns the exit status.

    A missing optional package (ImportError) exits with 1 and its message; a bad option value
    (ValueError from `run`) is reported through `parser.error`.
    """
    args = parser.parse_args(argv)
    try:
        result = run(args)
    except ImportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:
        parser.error(str(err))
    print(report(result))
    if args.json:
        write_json_atomic(args.json, result)
        print(f"results written to {args.json}")
    return 0
