"""`posformer data`: the datasets of the shared data folder that the research presets read; `data fetch` gets them."""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass
from pathlib import Path

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.data.catalog import DATASETS
from posformer.data.shared import DATA_DIR_ENV, default_data_dir
from posformer.data.sources import Dataset
from posformer.utils.options import option

WIDTH = 100
INDENT = 19


@dataclass
class FetchOptions:
    """The options of `posformer data fetch`."""

    names: list[str] = option(help="the dataset(s) to fetch (see below)", flag="NAME", choices=tuple(DATASETS))
    to: str | None = option(
        None,
        f"the data folder; each dataset goes to DIR/NAME/ (default: where the presets look, ${DATA_DIR_ENV} or "
        "../shared/data beside the repository)",
        metavar="DIR",
    )
    mirror: str | None = option(
        None,
        "read each file from URL_OR_DIR/NAME/FILE instead of its own source: a folder laid out like a data folder "
        "(another machine's copy) or an http, https or file URL of one (default: each file's source)",
        metavar="URL_OR_DIR",
    )
    timeout: float = option(60.0, "seconds to wait for a server", low=0, low_open=True)
    progress: bool = option(True, "no progress bar", flag="--no-progress")


def cmd_fetch(args: argparse.Namespace) -> int:
    """`posformer data fetch`: fetch each named dataset; say where it is and whether the presets look there."""
    from posformer.data.fetch import fetch

    fetching = options_from_args(FetchOptions, args)
    for name in fetching.names:
        done = fetch(name, fetching.to, fetching.mirror, fetching.timeout, fetching.progress)
        print(f"{name}: {len(done.fetched)} file(s) fetched, {len(done.present)} already in place, in {done.folder}")
    looked_in = default_data_dir()
    if fetching.to is not None and Path(fetching.to).resolve() != looked_in.resolve():
        print(f"the presets read {looked_in}: set {DATA_DIR_ENV}={Path(fetching.to).resolve()} to read these")
    return 0


def describe(data: Dataset) -> str:
    """A dataset for `--help`: its name, what it is, its size, license and readers, and what fetch cannot redo."""
    files = len(data.required)
    text = [f"{data.summary} {data.size / 1e6:.1f} MB in {files} file{'s' * (files > 1)}."]
    text += [f"License: {data.license}.", f"Read by: {data.read_by}.", *data.notes]
    lines = []
    for paragraph in text:
        lines += textwrap.wrap(paragraph, WIDTH - INDENT, break_on_hyphens=False)
    first = f"  {data.name:<{INDENT - 3}} {lines[0]}"
    return "\n".join([first, *(" " * INDENT + line for line in lines[1:])])


def _epilog() -> str:
    where = (
        f"Where the presets look: DIR/NAME/ with DIR ${DATA_DIR_ENV}, else ../shared/data beside the repository "
        f"(here: {default_data_dir()}). A missing dataset's error names the command that fetches it."
    )
    return "\n\n".join(
        [
            "datasets:\n" + "\n\n".join(describe(d) for d in DATASETS.values()),
            textwrap.fill(where, WIDTH, break_on_hyphens=False),
        ]
    )


FETCH = Command(
    "fetch",
    help="download a dataset into DIR/NAME/, each file checked against its sha256",
    description=textwrap.fill(
        "Download the datasets that the research presets read (posformer extrapolate --preset cpu|bytes|gpu, "
        "extend, longeval, bench --qa) into DIR/NAME/. Each file is streamed to a temporary file, its sha256 "
        "checked, then renamed into place: a failed download leaves no half-written file, and a file already in "
        "place with the right sha256 is kept. The dataset's SOURCE.md (where each file came from, its size and "
        "sha256) is written beside its files. Without network access, copy the files by hand into DIR/NAME/ "
        "or give --mirror a folder that holds them.",
        WIDTH,
        break_on_hyphens=False,
    ),
    epilog=_epilog(),
    formatter_class=argparse.RawDescriptionHelpFormatter,
    add_arguments=lambda parser: add_option_flags(parser, FetchOptions),
    run=cmd_fetch,
)
COMMAND = Command(
    "data",
    help="the datasets the research presets read: fetch",
    description="The datasets of the shared data folder that the research presets read.",
    subcommands=(FETCH,),
)
