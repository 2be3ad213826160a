"""Shared drawing plumbing: matplotlib on the Agg backend and atomic PNG writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from posformer.utils.file_mode import with_umask_mode


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: str | Path) -> Path:
    """Write `fig` as a PNG at `path` through a temporary file in the same folder and `os.replace`; close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp.png")
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
        os.replace(with_umask_mode(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        pyplot().close(fig)
    return path
