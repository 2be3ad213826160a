"""The `posformer` program: every sub-command, registered in one list (`COMMANDS`), the parser and `main`.

Each command is one `Command` declaration in its own module: here in cli/, or beside its feature
(the extrapolation and extension experiments declare theirs in cli/extrapolate.py and cli/extend.py).
"""

from __future__ import annotations

import argparse
import sys

from posformer.cli import (
    bench,
    convert,
    data,
    extend,
    extrapolate,
    generate,
    info,
    longeval,
    plot,
    qa,
    report,
    tokenizer,
    train,
)
from posformer.cli.command import Command, add_commands
from posformer.cli.failures import argument_problem, is_rust_panic, panic_line
from posformer.utils.provenance import invoked

COMMANDS: tuple[Command, ...] = (
    info.COMMAND,
    train.COMMAND,
    generate.COMMAND,
    convert.COMMAND,
    bench.COMMAND,
    qa.COMMAND,
    extrapolate.COMMAND,
    extend.COMMAND,
    longeval.COMMAND,
    plot.COMMAND,
    report.COMMAND,
    data.COMMAND,
    tokenizer.COMMAND,
)
EPILOG = "Run `posformer COMMAND --help` for the options of each command."


# bad input, a missing or unwritable file (OSError: its message names the path), a run that cannot go on, an optional
# package a setting needs (ImportError: its message names the `pip install`)
USER_ERRORS = (ValueError, OSError, RuntimeError, ImportError)
DEBUG_FLAG = "--debug"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posformer",
        description="Build, train and study Transformers from interchangeable parts.",
        epilog=EPILOG,
    )
    parser.add_argument(
        DEBUG_FLAG,
        action="store_true",
        help="show the Python traceback of an error (anywhere on the command line); without it an "
        "error is one line naming the field or file",
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
    """Run `posformer ARGV`; returns the exit status: 2 for bad input (one line on stderr naming the field or file;
    an argument that is not UTF-8, a panic of the Rust tokenizer on its files or input), 1 for an unexpected error
    (its type and message; `--debug` shows the traceback), 130 when interrupted."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = DEBUG_FLAG in argv
    problem = argument_problem(argv)
    if problem is not None:
        print(f"posformer: error: {problem}", file=sys.stderr)
        return 2
    args = parse([arg for arg in argv if arg != DEBUG_FLAG])
    invoked(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if debug:
            raise
        user_error = isinstance(err, USER_ERRORS)
        kind = "error" if user_error else f"internal error ({type(err).__name__})"
        hint = "" if user_error else f" (rerun with {DEBUG_FLAG} for the traceback, and please report it)"
        print(f"posformer {args.command}: {kind}: {err}{hint}", file=sys.stderr)
        return 2 if user_error else 1
    except BaseException as err:  # a Rust panic; SystemExit, GeneratorExit and the like go on
        if debug or not is_rust_panic(err):
            raise
        print(f"posformer {args.command}: error: {panic_line(err)}", file=sys.stderr)
        return 2
