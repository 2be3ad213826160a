"""What every benchmark's command line shares: the help layout, the JSON file and `main`'s flow."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option; the description and epilog kept as written."""


def write_json(result: dict[str, Any], path: str | Path) -> None:
    """Write `result` as JSON through a temporary file in the same folder, renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
        write_json(result, args.json)
        print(f"results written to {args.json}")
    return 0
