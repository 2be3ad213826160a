"""The run's JSONL metrics log and its loss-curve PNG."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

from posformer.train.write_errors import writing
from posformer.utils.file_limits import LINE, limited_lines
from posformer.utils.safe_write import open_append, write_text_atomic

SMOOTH_FROM = 50  # steps from which the loss curve gets a running mean over the raw steps
SMOOTH_POINTS = 40  # the running mean's window is about 1/SMOOTH_POINTS of the steps


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


def running_mean(values: list[float], window: int) -> list[float]:
    """The mean of each run of `window` consecutive values (len(values) - window + 1 of them)."""
    if window < 1 or window > len(values):
        raise ValueError(f"running_mean: window must be in 1..{len(values)}, got {window}")
    total, out = sum(values[:window]), []
    for k in range(window, len(values) + 1):
        out.append(total / window)
        if k < len(values):
            total += values[k] - values[k - window]
    return out


def plot_losses(records: list[dict], path: Path, title: str) -> Path | None:
    """Training loss (and every eval metric named *loss) against step, as a PNG in the house style
    (`utils.figure`). Over `SMOOTH_FROM` steps, each step's loss is drawn faint and a running mean of about
    1/`SMOOTH_POINTS` of the steps over it, centred on its window. None without matplotlib.

    Raises `RunFileError` (naming `path`) when the PNG cannot be written."""
    try:
        from posformer.utils.figure import PALETTE, line_style, pyplot, save_png

        plt = pyplot()
    except ImportError:
        return None
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    evals = [(r["step"], r["eval"]) for r in records if "eval" in r]
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    if len(train) >= SMOOTH_FROM:
        steps, losses = zip(*train)
        window = max(2, len(train) // SMOOTH_POINTS)
        ax.plot(
            steps, losses, color=PALETTE[0], linestyle="-", linewidth=0.7, alpha=0.35, label="train loss, each step"
        )
        middle = window // 2
        mean = running_mean(list(losses), window)
        ax.plot(
            steps[middle : middle + len(mean)],
            mean,
            color=PALETTE[0],
            linestyle="-",
            linewidth=2.0,
            label=f"train loss, mean of {window} steps",
        )
    elif train:
        ax.plot(*zip(*train), label="train loss", **line_style(0, len(train)))
    for k, name in enumerate(sorted({key for _, e in evals for key in e if key.endswith("loss")})):
        points = [(s, e[name]) for s, e in evals if name in e]
        ax.plot(*zip(*points), label=name, **line_style(k + 1, len(points)))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (cross-entropy, nats)")
    ax.set_title(title)
    if train or evals:
        ax.legend()
    ax.grid(alpha=0.3)
    with writing(path, "the loss curve"):
        save_png(fig, path)
    return path
