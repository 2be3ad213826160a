"""Writing a file so that a crash never leaves it half-written: a temporary file beside it, then a rename. The
file gets the umask's mode (`utils.file_mode`), not the temporary file's 0600."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from posformer.utils.file_mode import with_umask_mode


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` (folders created), replacing it in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(with_umask_mode(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write `obj` as indented UTF-8 JSON to `path` (folders created), replacing it in one rename."""
    return write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")
