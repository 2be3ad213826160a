"""A file a run writes that cannot be written stops the run with one clear message naming it, not a traceback."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator


class RunFileError(RuntimeError):
    """A file of a run (checkpoint, metrics log, run config, outputs) could not be written; names the path."""


def describe(err: Exception, path: str | os.PathLike) -> str:
    """`path`, then why the write failed (an OSError's strerror), and the file refused when that is another one."""
    reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
    culprit = getattr(err, "filename", None)
    culprit = culprit if isinstance(culprit, str) else None
    if culprit and Path(culprit) != Path(path):
        return f"{path}: {reason} ({culprit})"
    return f"{path}: {reason}"


@contextlib.contextmanager
def writing(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn an OSError raised in the block into a `RunFileError`: "could not write {what} {path}: {reason}"."""
    try:
        yield
    except OSError as err:
        raise RunFileError(f"could not write {what} {describe(err, path)}") from err
