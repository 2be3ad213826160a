"""The `posformer` program: every registered command (and sub-command) parses and answers --help."""

import pytest

from posformer.cli import main
from posformer.cli.bench import BENCHMARKS
from posformer.cli.command import Command
from posformer.cli.program import COMMANDS


def _command_lines() -> list[list[str]]:
    lines = []
    for command in COMMANDS:
        lines.append([command.name])
        lines += [[command.name, sub.name] for sub in command.subcommands]
    return lines + [["bench", flag] for flag in BENCHMARKS]


@pytest.mark.parametrize("argv", _command_lines(), ids=" ".join)
def test_every_command_answers_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith(f"usage: posformer {' '.join(argv)}"), usage[:200]


def test_the_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert all(f"    {command.name}" in listed for command in COMMANDS)


def test_a_command_runs_something_or_holds_commands():
    leaf = Command("leaf", help="a leaf", run=lambda args: 0)
    with pytest.raises(ValueError, match="'both'.*exactly one of run or subcommands"):
        Command("both", help="", run=lambda args: 0, subcommands=(leaf,))
    with pytest.raises(ValueError, match="'neither'.*exactly one of run or subcommands"):
        Command("neither", help="")
