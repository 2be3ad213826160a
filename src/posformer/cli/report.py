"""`posformer report`: the tables of recorded experiment runs, printed or put into a page of the docs."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.utils.options import option


@dataclass
class ReportOptions:
    """The options of `posformer report`."""

    runs: list[str] = option(
        help="output directories of `posformer extrapolate` (with or without --task, --seeds) or `posformer extend`",
        flag="RUN",
    )
    into: str | None = option(
        None, "a markdown page: the tables replace the text of its block --block (other text is kept)", metavar="FILE"
    )
    block: str | None = option(
        None,
        "the block of --into FILE, between the lines '<!-- report NAME -->' and '<!-- /report NAME -->'",
        metavar="NAME",
    )


DESCRIPTION = """\
Print the tables of recorded runs, from their results.json: one run's tables (results.md), or, for task runs
of several tasks, the summary over the tasks (the mean reciprocal rank beside Kazemnejad et al. 2023's); a
run over seeds (--seeds) gives every measure's mean over seeds with its 95% interval and each comparison
seed by seed. The text opens with the commands and commits that made the runs.

With --into FILE --block NAME the text replaces block NAME of FILE, its headings two levels down, and the
block's opening line records this command: every measured table of the docs is regenerated this way
(`grep -n "<!-- report" docs/*.md` lists them, each with the command that remakes it).
"""

EPILOG = "Example: posformer report runs/tasks-quick-* --into docs/tasks.md --block tasks-quick"


def demote(markdown: str, levels: int) -> str:
    """Every heading of `markdown` `levels` levels lower ('# A' -> '### A' for 2)."""
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + levels) + " ", markdown, flags=re.MULTILINE)


def report_text(runs: list[str], for_page: bool) -> str:
    """The generated text: who made the runs, then their tables (headings demoted for a page)."""
    from pathlib import Path

    from posformer.experiments.reports.runs import made_by, read_run, runs_markdown

    found = {Path(run).resolve().name: read_run(run) for run in runs}
    body = runs_markdown(found)
    lines = "\n".join(f"- {line}" for line in made_by(found))
    return f"Made by:\n\n{lines}\n\n" + (demote(body, 2) if for_page else body)


def cmd_report(args: argparse.Namespace) -> int:
    from posformer.experiments.doc_blocks import replace_block
    from posformer.utils.provenance import command_line

    options = options_from_args(ReportOptions, args)
    if (options.into is None) != (options.block is None):
        raise ValueError("--into FILE and --block NAME go together")
    text = report_text(options.runs, for_page=options.into is not None)
    if options.into is None:
        print(text)
        return 0
    replace_block(options.into, options.block, text, command_line())
    print(f"written: block {options.block} of {options.into}")
    return 0


COMMAND = Command(
    "report",
    help="the tables of recorded experiment runs, printed or written into a block of a docs page",
    description=DESCRIPTION,
    epilog=EPILOG,
    formatter_class=argparse.RawDescriptionHelpFormatter,
    add_arguments=lambda parser: add_option_flags(parser, ReportOptions),
    run=cmd_report,
)
