"""The run's JSONL metrics log and its loss-curve PNG."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

from posformer.train.write_errors import writing
from posformer.utils.file_limits import LINE, limited_lines
from posformer.utils.safe_write import open_append, replacing, write_text_atomic


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class MetricsLog:
    """One JSON object per line: {"step", "loss", "lr", ...} for training, {"step", "eval": {...}} for evaluations.

    A line that is not such a record (garbage, a line cut short by a kill) is skipped with a
    warning naming the file and the line; the records around it are kept.
    """

    def __init__(self, path: Path, enabled: bool = True, warn: Callable[[str], None] = _warn) -> None:
        self.path, self.enabled, self.warn = path, enabled, warn

    def records(self) -> list[dict]:
        """Every valid record, in file order, read a line at a time; unreadable lines are skipped with a warning
        (a line over `file_limits.LINE` is an error naming the file)."""
        if not self.path.is_file():
            return []
        out = []
        for number, line in limited_lines(self.path, str(self.path), LINE):
            raw = line.removesuffix(b"\n")
            if not raw.strip():
                continue
            record = _parse(raw)
            if record is None:
                self.warn(f"warning: {self.path}, line {number}: not a metrics record, skipped: {_preview(raw)}")
                continue
            out.append(record)
        return out

    def truncate_after(self, step: int) -> None:
        """Keep the valid records up to `step` (a resumed run continues the log from its checkpoint; the records
        after it are logged again). Unreadable lines are dropped, each with a warning."""
        if not self.enabled:
            return
        kept = [r for r in self.records() if r["step"] <= step]
        with writing(self.path, "the metrics log"):
            write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with writing(self.path, "the metrics log"), open_append(self.path) as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


def _parse(raw: bytes) -> dict | None:
    """The record on one line: a JSON object with an integer "step"; None for anything else."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(record, dict) or isinstance(record.get("step"), bool) or not isinstance(record.get("step"), int):
        return None
    return record


def _preview(raw: bytes, width: int = 60) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    return repr(text if len(text) <= width else text[:width] + "...")


def plot_losses(records: list[dict], path: Path, title: str) -> Path | None:
    """Training loss (and every eval metric named *loss) against step, as a PNG. None without matplotlib.

    Raises `RunFileError` (naming `path`) when the PNG cannot be written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    evals = [(r["step"], r["eval"]) for r in records if "eval" in r]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if train:
        ax.plot(*zip(*train), label="train loss", linewidth=1)
    for name in sorted({k for _, e in evals for k in e if k.endswith("loss")}):
        points = [(s, e[name]) for s, e in evals if name in e]
        ax.plot(*zip(*points), marker="o", label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    try:
        with writing(path, "the loss curve"), replacing(path) as tmp:
            fig.savefig(tmp, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
