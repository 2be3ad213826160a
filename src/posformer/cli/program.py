"""The `posformer` program: every sub-command, registered in one list (`COMMANDS`), the parser and `main`.

Each command is one `Command` declaration in its own module: here in cli/, or beside its feature
(the extrapolation experiment declares its own, in experiments/extrapolation/command.py).
"""

from __future__ import annotations

import argparse
import sys

from posformer.cli import bench, convert, generate, info, plot, qa, train
from posformer.cli.command import Command, add_commands
from posformer.experiments.extension import command as extend
from posformer.experiments.extrapolation import command as extrapolate

COMMANDS: tuple[Command, ...] = (info.COMMAND, train.COMMAND, generate.COMMAND, convert.COMMAND, bench.COMMAND,
                                 qa.COMMAND, extrapolate.COMMAND, extend.COMMAND,
                                 plot.COMMAND)
EPILOG = "Run `posformer COMMAND --help` for the options of each command."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posformer",
        description="Build, train and study Transformers from interchangeable parts.",
        epilog=EPILOG,
    )
    add_commands(parser, COMMANDS, dest="command", metavar="COMMAND")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """The parsed command line; a `passes_on` command gets every later argument unparsed, options included."""
    passing = {command.name: command for command in COMMANDS if command.passes_on}
    if argv[:1] and argv[0] in passing:
        command = passing[argv[0]]
        return argparse.Namespace(command=command.name, run=command.run, rest=argv[1:])
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run `posformer ARGV`; returns the exit status (2 for bad input, reported on stderr)."""
    args = parse(sys.argv[1:] if argv is None else list(argv))
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"posformer {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
