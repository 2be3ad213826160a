"""The `posformer` command line: one module per sub-command, each declared once as a `Command` (command.py)
and registered in `program.COMMANDS`. `posformer.cli:main` is the entry point (`python -m posformer.cli` too)."""

from posformer.cli.program import build_parser, main

__all__ = ["build_parser", "main"]
