"""Every file posformer writes goes through here, so that no write follows a symlink out of the folder it was
given, and a crash never leaves a file half-written.

- A file written whole (`write_text_atomic`, `write_json_atomic`, `write_bytes_atomic`, `writing_file`, or
  `replacing` for writers that take a file name: safetensors, `torch.save`, `savefig`) goes to a new temporary
  file beside it, created with `O_CREAT | O_EXCL | O_NOFOLLOW`, then renamed over it: a rename replaces a symlink
  at the path rather than writing through it. The file gets the umask's mode (`utils.file_mode`).
- `write_json_set_atomic` writes several files as one set: all new, or, when one cannot be written (a full
  disk), all as they were.
- A file kept and added to (`open_append`: a metrics log) or opened for update (`open_for_update`: a run's lock)
  is opened with `O_NOFOLLOW` and must be a regular file: a symlink, FIFO or directory there is a `WriteRefused`
  naming the path.
- `make_dirs(path, root)` creates the folders from `root` (the folder a command was given) down to `path`, each
  one a real folder: a symlink among them is refused, so nothing is created outside `root`.
- `check_extra_files(files, own, writer)` checks the names of files a caller asks to have written into a folder
  (save_pretrained's and a training checkpoint's `extra_files`): plain file names, none of the writer's own.

Files written inside a folder posformer has just created (a checkpoint's staging folder, a `mkdtemp` or
`TemporaryDirectory`) cannot meet a planted link; they are written there directly and the folder, or each file,
is then renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, BinaryIO

from posformer.utils.file_mode import with_umask_mode

PROBE = b"posformer write test\n"
KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"))


class WriteRefused(OSError):
    """A path posformer will not write through (a symlink, a FIFO, a directory where a file goes, a file where a
    folder goes); its message names the path and what to do."""

    def __init__(self, path: str | os.PathLike, what: str) -> None:
        reason = f"{path} is {what}; posformer writes nothing through it (remove it or choose another path)"
        super().__init__(errno.ELOOP if what == KINDS[0][1] else errno.EEXIST, reason, str(path))

    def __str__(self) -> str:
        return self.strerror


def _kind(mode: int) -> str:
    """What a non-regular file is, for a message: 'a symbolic link', 'a FIFO', ..."""
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


def make_dirs(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Create folder `path` and return it. With `root` (a folder above `path`): `root` is created as given, and
    every folder below it on the way to `path` must be a real folder (a symlink there is a `WriteRefused`).
    Without: `path` is the folder given, created with its parents; a file there is a `WriteRefused`."""
    path = Path(path)
    if root is None:
        if path.exists() and not path.is_dir():
            raise WriteRefused(path, "a file, not a directory")
        path.mkdir(parents=True, exist_ok=True)
        return path
    here = make_dirs(root)
    for part in path.relative_to(root).parts:
        here = here / part
        with contextlib.suppress(FileExistsError):
            os.mkdir(here)
        mode = os.lstat(here).st_mode
        if not stat.S_ISDIR(mode):
            raise WriteRefused(here, "a file, not a directory" if stat.S_ISREG(mode) else _kind(mode))
    return path


def check_extra_files(files: Mapping[str, str], own: tuple[str, ...], writer: str) -> None:
    """Each name of `files` ({name: text} to write into one folder) is a plain file name: no folder, not '.' or
    '..', so a file of that folder itself, never one reached through a parent or a link beside it; none is one of
    `own` (the files `writer` writes itself); each content is text. A ValueError naming `writer` and the entry
    otherwise, to raise before anything is written."""
    for name, text in files.items():
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ValueError(
                f"{writer}: extra_files name {name!r} is invalid: expected the plain name of a file in the "
                "output directory (no folder, no '..')"
            )
        if name in own:
            raise ValueError(f"{writer}: extra_files name {name!r} is invalid: {writer} writes that file itself")
        if not isinstance(text, str):
            raise ValueError(f"{writer}: extra_files[{name!r}] is a {type(text).__name__}; expected text")


def _temporary(path: Path, data: bytes) -> Path:
    """A new temporary file beside `path` holding `data`, with the umask's mode; none is left when this fails."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        _fill(fd, data)
        return with_umask_mode(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fill(fd: int, data: bytes) -> None:
    """Write `data` to the new file open at `fd`, then close it."""
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _into_place(tmp: Path, path: Path) -> Path:
    """Rename `tmp` over `path` (a symlink at `path` is replaced, not followed); `tmp` is removed on failure."""
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _parent(path: str | os.PathLike, root: str | os.PathLike | None) -> Path:
    path = Path(path)
    make_dirs(path.parent, root)
    return path


def write_bytes_atomic(path: str | os.PathLike, data: bytes, root: str | os.PathLike | None = None) -> Path:
    """Write `data` to `path` (its folders created: below `root`, none a symlink), replacing it in one rename."""
    path = _parent(path, root)
    return _into_place(_temporary(path, data), path)


def write_text_atomic(path: str | os.PathLike, text: str, root: str | os.PathLike | None = None) -> Path:
    """Write `text` (UTF-8) to `path` (folders created), replacing it in one rename."""
    return write_bytes_atomic(path, text.encode("utf-8"), root)


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any, root: str | os.PathLike | None = None) -> Path:
    """Write `obj` as indented UTF-8 JSON to `path` (folders created), replacing it in one rename."""
    return write_bytes_atomic(path, _json_bytes(obj), root)


def write_json_set_atomic(directory: str | os.PathLike, files: Mapping[str, Any]) -> list[Path]:
    """Write each `files[name]` as indented UTF-8 JSON to `directory / name`, as one set: every file goes to a
    temporary name first, and only when all are written is each renamed over its target. When a write fails, the
    temporary files are removed and every target is as it was. Returns the paths written."""
    make_dirs(directory)
    written: list[tuple[Path, Path]] = []
    try:
        for name, obj in files.items():
            path = Path(directory) / name
            written.append((_temporary(path, _json_bytes(obj)), path))
        for tmp, path in written:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in written:
            Path(tmp).unlink(missing_ok=True)
        raise
    return [path for _, path in written]


@contextlib.contextmanager
def replacing(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Iterator[Path]:
    """A new empty temporary file beside `path` (same suffix), for a writer that takes a file name; renamed over
    `path` with the umask's mode when the block ends without an error, removed otherwise."""
    path = _parent(path, root)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with_umask_mode(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _into_place(tmp, path)


@contextlib.contextmanager
def writing_file(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Iterator[BinaryIO]:
    """A binary file to write `path` through (`replacing`): `path` changes only when the block ends without an
    error, and no partial file is left otherwise."""
    with replacing(path, root) as tmp, open(tmp, "wb") as f:
        yield f


def _open_regular(path: Path, flags: int) -> int:
    """A descriptor of the regular file at `path` (created if missing), never through a symlink; a FIFO or
    directory there is refused without blocking."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as err:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise err from None
        if not stat.S_ISREG(mode):
            raise WriteRefused(path, _kind(mode)) from err
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise WriteRefused(path, _kind(mode))
    os.set_blocking(fd, True)
    return fd


def open_for_update(path: str | os.PathLike) -> int:
    """A read-write descriptor of the regular file at `path` (created if missing); `WriteRefused` for a symlink,
    FIFO or directory there."""
    return _open_regular(Path(path), os.O_RDWR)


def open_append(path: str | os.PathLike) -> IO[str]:
    """The regular file at `path` (created if missing) opened to append UTF-8 text; `WriteRefused` for a symlink,
    FIFO or directory there."""
    return os.fdopen(_open_regular(Path(path), os.O_WRONLY | os.O_APPEND), "a", encoding="utf-8")


def probe_writable(directory: str | os.PathLike) -> None:
    """Prove a file can be written in `directory` (an OSError when not): a new temporary file, removed again."""
    directory = Path(directory)
    _temporary(directory / f"write-test-{os.getpid()}", PROBE).unlink()
