"""Progress bars that suit where the output goes: tqdm's redrawn bar on a terminal; elsewhere (a log file, CI, a
job scheduler's output) one plain line every `LOG_EVERY_S` seconds, with no carriage returns to fill the log."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm.auto import tqdm

LOG_EVERY_S = 30.0
ProgressBar = tqdm


class _Lines:
    """A stream that turns each of tqdm's redraws ("\\r" + the bar) into one line of its own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable: Any = None, **kwargs: Any) -> ProgressBar:
    """`tqdm(iterable, **kwargs)` on a terminal; otherwise a line every LOG_EVERY_S seconds (and at the end)."""
    stream = kwargs.get("file") or sys.stderr
    if not (hasattr(stream, "isatty") and stream.isatty()):
        kwargs = {"mininterval": LOG_EVERY_S, "ascii": True, "ncols": 100, **kwargs, "file": _Lines(stream)}
        kwargs.pop("dynamic_ncols", None)
    return tqdm(iterable, **kwargs)
