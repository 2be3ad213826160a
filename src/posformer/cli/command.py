"""The one way to declare a `posformer` sub-command: a `Command`, registered in `posformer.cli.program.COMMANDS`.

    COMMAND = Command("info", help="summarise a model", description="...",
                      add_arguments=add_info_arguments, run=cmd_info)

The same declaration builds the sub-command's parser under `posformer` (`add_commands`) and a
parser of its own (`standalone_parser`: the benchmarks behind `posformer bench --generation`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Sequence


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """The `add_arguments` of a command without options of its own."""


@dataclass(frozen=True)
class Command:
    """One sub-command: its name, its help, how it adds its arguments, and what it runs.

    run: `run(args) -> exit status`, given the parsed arguments (`args.command` is the top-level
        command's name). A command of commands (`posformer qa train`) gives `subcommands` instead.
    passes_on: every argument after the command's name reaches `run` unparsed, options included,
        as `args.rest`: for a command that picks the parser of its arguments itself (`bench`).
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None] = no_arguments
    run: Callable[[argparse.Namespace], int] | None = None
    description: str | None = None
    epilog: str | None = None
    formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter
    subcommands: tuple[Command, ...] = ()
    passes_on: bool = False

    def __post_init__(self) -> None:
        if (self.run is None) == (not self.subcommands):
            raise ValueError(f"command {self.name!r}: give exactly one of run or subcommands")
        if self.passes_on and self.subcommands:
            raise ValueError(f"command {self.name!r}: passes_on is for a command with run, not subcommands")

    def parser_options(self) -> dict:
        """The keyword arguments of the command's `ArgumentParser` (or `add_parser`)."""
        return dict(
            description=self.description,
            epilog=self.epilog,
            formatter_class=self.formatter_class,
            add_help=not self.passes_on,
        )

    def build(self, parser: argparse.ArgumentParser) -> None:
        """Give `parser` this command's arguments and what it runs (its sub-commands' too)."""
        self.add_arguments(parser)
        if self.passes_on:
            parser.add_argument("rest", nargs=argparse.REMAINDER)
        if self.subcommands:
            add_commands(parser, self.subcommands, dest=f"{self.name}_command", metavar=f"{self.name.upper()}_COMMAND")
        else:
            parser.set_defaults(run=self.run)


def add_commands(parser: argparse.ArgumentParser, commands: Sequence[Command], dest: str, metavar: str) -> None:
    """One required sub-command of `commands` under `parser`; its name goes to `args.<dest>`."""
    sub = parser.add_subparsers(dest=dest, metavar=metavar, required=True)
    for command in commands:
        command.build(sub.add_parser(command.name, help=command.help, **command.parser_options()))


def standalone_parser(command: Command, prog: str) -> argparse.ArgumentParser:
    """A parser of `command`'s own, called `prog` in its usage line."""
    parser = argparse.ArgumentParser(prog=prog, **command.parser_options())
    command.build(parser)
    return parser
