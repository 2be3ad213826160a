"""Shared drawing plumbing: matplotlib on the Agg backend and atomic PNG writes."""

from __future__ import annotations

from pathlib import Path

from posformer.utils.safe_write import writing_file


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: str | Path) -> Path:
    """Write `fig` as a PNG at `path` through a temporary file in the same folder and `os.replace`
    (`safe_write.writing_file`: a symlink at `path` is replaced, not followed); close it."""
    path = Path(path)
    try:
        with writing_file(path) as f:
            fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    finally:
        pyplot().close(fig)
    return path
