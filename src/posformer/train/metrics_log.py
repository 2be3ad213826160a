"""The run's JSONL metrics log and its loss-curve PNG."""

from __future__ import annotations

import json
import os
from pathlib import Path

from posformer.atomic import write_text_atomic


class MetricsLog:
    """One JSON object per line: {"step", "loss", "lr", ...} for training, {"step", "eval": {...}} for evaluations."""

    def __init__(self, path: Path, enabled: bool = True) -> None:
        self.path, self.enabled = path, enabled

    def records(self) -> list[dict]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a kill
                break
        return out

    def truncate_after(self, step: int) -> None:
        """Keep the records up to `step` (a resumed run continues the log from its checkpoint)."""
        if not self.enabled:
            return
        kept = [r for r in self.records() if r.get("step", 0) <= step]
        write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


def plot_losses(records: list[dict], path: Path, title: str) -> Path | None:
    """Training loss (and every eval metric named *loss) against step, as a PNG. None without matplotlib."""
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
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)
    return path
