"""Files get the mode the process's umask gives a new file (0644 under the usual 022), as `open` would give them.

A temporary file (`tempfile.mkstemp`: 0600) renamed into place, or a safetensors file (written 0600), would otherwise
stay private to its writer, which breaks the shared file systems that several machines or users read a run from.
"""

from __future__ import annotations

import os
from pathlib import Path


def umask_mode() -> int:
    """The mode a new file gets under the current umask: 0o666 without the umask's bits."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def with_umask_mode(path: str | Path) -> Path:
    """Give the file at `path` the mode a new file gets under the umask (`umask_mode`); returns the path."""
    os.chmod(path, umask_mode())
    return Path(path)
