"""Writing a file so that a crash never leaves it half-written: a temporary file beside it, then a rename. The
file gets the umask's mode (`utils.file_mode`), not the temporary file's 0600.

`write_json_set_atomic` writes several files as one set (an evaluation's predictions, answers and report): all of
them new, or, when one cannot be written (a full disk), all as they were, so the files of two runs never mix.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posformer.utils.file_mode import with_umask_mode


def _temporary(path: Path, text: str) -> Path:
    """A temporary file beside `path` holding `text` (UTF-8), with the umask's mode; none is left when the write
    fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return with_umask_mode(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` (folders created), replacing it in one rename."""
    path = Path(path)
    tmp = _temporary(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_set_atomic(directory: str | Path, files: Mapping[str, Any]) -> list[Path]:
    """Write each `files[name]` as indented UTF-8 JSON to `directory / name`, as one set: every file goes to a
    temporary name first, and only when all are written is each renamed over its target. When a write fails, the
    temporary files are removed and every target is as it was. Returns the paths written."""
    written: list[tuple[Path, Path]] = []
    try:
        for name, obj in files.items():
            path = Path(directory) / name
            written.append((_temporary(path, _json_text(obj)), path))
        for tmp, path in written:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in written:
            Path(tmp).unlink(missing_ok=True)
        raise
    return [path for _, path in written]


def _json_text(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2) + "\n"


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write `obj` as indented UTF-8 JSON to `path` (folders created), replacing it in one rename."""
    return write_text_atomic(path, _json_text(obj))
