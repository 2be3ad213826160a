"""Every file posformer reads whole has a size limit fitting its kind, and one reader keeps to it.

    data = read_limited(path, f"run config {path}", CONFIG)     # bytes; FileTooLarge past 8 MiB
    check_size(path, f"tokenizer file {path}", TOKENIZER)       # before a library reads the file itself
    for number, line in limited_lines(path, str(path), LINE):   # a JSON Lines file, one bounded line at a time

A file is opened without blocking and checked on the open descriptor to be a regular file (a FIFO or device is
never waited on or read), its size is checked before a byte is read, and no more than the limit is read even when
the file grows meanwhile: a sparse giant (a few bytes on disk) costs nothing. Going over is a `FileTooLarge` (a
`ValueError`) naming the file, its size and the limit. An empty or blank path is refused (`not_blank`): it would
otherwise stand for the current directory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import NamedTuple

MiB = 1 << 20


class SizeLimit(NamedTuple):
    """The most bytes a file of one kind may hold, and the kind, as an error names it."""

    bytes: int
    kind: str


CONFIG = SizeLimit(8 * MiB, "a config, manifest, settings or results file")
TOKENIZER = SizeLimit(64 * MiB, "a tokenizer file")
DATA = SizeLimit(1024 * MiB, "a data or text file read whole")
LINE = SizeLimit(64 * MiB, "one line of a JSON Lines file")

FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileTooLarge(ValueError):
    """A file (or a line of one) larger than the limit of its kind."""


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words ("a FIFO (named pipe)")."""
    return next((kind for test, kind in FILE_KINDS if test(mode)), "another kind of file")


def not_blank(path: str | os.PathLike, name: str) -> str:
    """The text of `path`; a `ValueError` naming `name` when it is empty or only blanks."""
    text = os.fspath(path)
    if not str(text).strip():
        label = name.strip() or "a path"
        raise ValueError(f"{label}: the path is empty ({text!r}); expected the path of a file or directory")
    return text


def too_large(name: str, size: int, limit: SizeLimit) -> FileTooLarge:
    """The error for `name` of `size` bytes over `limit`."""
    return FileTooLarge(
        f"{name} is too large: {size:,} bytes, over the {limit.bytes // MiB:,} MiB limit of {limit.kind}"
    )


def check_size(path: str | os.PathLike, name: str, limit: SizeLimit) -> int:
    """The size of the file at `path` (symlinks followed); `FileTooLarge` naming `name` over `limit`."""
    size = os.stat(path).st_size
    if size > limit.bytes:
        raise too_large(name, size, limit)
    return size


def _open_regular(path: str | os.PathLike, name: str) -> int:
    """A descriptor of the regular file at `path`, opened without blocking (a FIFO is not waited on); a
    `FileNotFoundError` or `ValueError` naming `name` otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(not_blank(path, name), flags)
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} does not exist") from None
    except OSError as err:
        raise ValueError(f"{name} cannot be read: {err.strerror or err}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ValueError(f"{name} is not a regular file but {file_kind(mode)}: expected a file")
    return fd


def read_limited(path: str | os.PathLike, name: str, limit: SizeLimit) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them: `FileTooLarge` naming `name` past it."""
    fd = _open_regular(path, name)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size > limit.bytes:
            raise too_large(name, size, limit)
        try:
            data = f.read(limit.bytes + 1)
        except OSError as err:
            raise ValueError(f"{name} cannot be read: {err.strerror or err}") from None
    if len(data) > limit.bytes:  # it grew while being read
        raise too_large(name, len(data), limit)
    return data


def limited_lines(path: str | os.PathLike, name: str, limit: SizeLimit = LINE) -> Iterator[tuple[int, bytes]]:
    """(number from 1, bytes) of each line of the regular file at `path`, read one at a time (the file may be of
    any size); a line longer than `limit` is a `FileTooLarge` naming `name` and the line."""
    fd = _open_regular(path, name)
    with os.fdopen(fd, "rb") as f:
        number = 0
        while raw := f.readline(limit.bytes + 1):
            number += 1
            if len(raw.rstrip(b"\r\n")) > limit.bytes:
                raise FileTooLarge(
                    f"{name}: line {number} is too large: over the {limit.bytes // MiB:,} MiB limit of {limit.kind}"
                )
            yield number, raw
