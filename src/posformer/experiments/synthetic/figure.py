"""The figures of a task run, in the house style of `utils.figure`: exact match against task length, one line per
encoding (accuracy.png; over seeds, the mean with its 95% interval over seeds as error bars), and one panel per
task for several runs (tasks-summary.png) with one legend, each encoding drawn alike in every panel.

Five encodings' filled bands overlapped into one blot where the rows agreed (at and near 0): the points of each
row are shifted a little along the log2 length axis and carry thin bars (`utils.figure.draw_interval_lines`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from posformer.experiments.seeds.stats import spread
from posformer.utils.figure import (
    REFERENCE_COLOR,
    draw_interval_lines,
    label_outer_panels,
    line_style,
    panel_grid,
    pyplot,
    save_png,
)

Curve = list[tuple[int, float, float | None, float | None]]  # (length, exact match, low, high) at each length


@dataclass
class TaskPanel:
    """One task's accuracies: curves {encoding: Curve}; train_len: the longest trained length; eval_lens: the
    evaluated lengths."""

    task: str
    train_len: int
    eval_lens: list[int]
    curves: dict[str, Curve]


def task_panel(results: dict) -> TaskPanel:
    """The panel of a task run's results.json: each encoding's accuracy by length; over seeds, the mean with its
    95% Student-t interval over seeds, clipped to [0, 1] (no bar where every seed gave the same value)."""
    cfg = results["config"]
    lengths = cfg["eval_lens"]
    curves: dict[str, Curve] = {}
    if "per_seed" not in results:
        for row, r in results["rows"].items():
            if r.get("error") is None:
                curves[row] = [(n, r["accuracy"][str(n)], None, None) for n in lengths]
        return TaskPanel(cfg["task"], cfg["train_len"], lengths, curves)
    runs = list(results["per_seed"].values())
    for row in runs[0]["rows"]:
        if any(run["rows"].get(row, {}).get("error", "missing") is not None for run in runs):
            continue
        points = []
        for n in lengths:
            found = spread([run["rows"][row]["accuracy"][str(n)] for run in runs])
            low, high = found.interval or (None, None)
            if low is not None:
                low, high = max(0.0, low), min(1.0, high)
            points.append((n, found.mean, low, high))
        curves[row] = points
    return TaskPanel(cfg["task"], cfg["train_len"], lengths, curves)


def _seeds_note(results: list[dict]) -> str:
    seeds = {len(r["per_seed"]) for r in results if "per_seed" in r}
    if not seeds:
        return "one seed"
    return f"mean of {'/'.join(str(n) for n in sorted(seeds))} seeds, bars: 95% interval over seeds"


def _draw_panel(ax, panel: TaskPanel, styles: dict[str, dict], dodge: bool) -> bool:
    shifted = draw_interval_lines(ax, panel.curves, styles, dodge)
    ax.axvline(panel.train_len, color=REFERENCE_COLOR, lw=1.0, ls=":", label="longest trained length")
    ax.set_xscale("log", base=2)
    ax.set_xticks(panel.eval_lens, [str(n) for n in panel.eval_lens])
    ax.minorticks_off()
    ax.set_ylim(-0.04, 1.04)
    ax.set_title(f"{panel.task} (trained at n \u2264 {panel.train_len})")
    ax.grid(True, alpha=0.3)
    return shifted


def draw_panels(panels: list[TaskPanel], path: str | Path, note: str, columns: int = 3) -> Path:
    """One panel per task, one legend for all (an encoding has the same look in every panel); `note`: how the
    values were made (seeds, bars), in the figure's title."""
    if not panels:
        raise ValueError("draw_panels: panels is empty; give at least one TaskPanel")
    encodings = list(dict.fromkeys(row for panel in panels for row in panel.curves))
    styles = {row: line_style(i) for i, row in enumerate(encodings)}
    plt = pyplot()
    columns = min(columns, len(panels))
    fig, axes = panel_grid(plt, len(panels), columns, (5.0, 3.6) if len(panels) > 1 else (6.5, 4.5))
    dodge = any(p[2] is not None for panel in panels for curve in panel.curves.values() for p in curve)
    shifted = False
    for ax, panel in zip(axes, panels):  # every panel shifted alike: rows that agree at 0 still show apart
        shifted |= _draw_panel(ax, panel, styles, dodge)
    label_outer_panels(axes, columns, "task length n (log scale)", "exact-match accuracy")
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=min(len(handles), 6))
    fig.suptitle(f"Exact match against task length\n({note}{'; points shifted slightly along x' if shifted else ''})")
    return save_png(fig, path)


def plot(results: dict, path: Path) -> Path:
    """accuracy.png: exact-match accuracy against task length, one line per encoding."""
    return draw_panels([task_panel(results)], path, _seeds_note([results]))


def plot_summary(runs: dict[str, dict], path: Path, columns: int = 3) -> Path:
    """tasks-summary.png: one panel per task run ({name: results}), as `plot` draws each, one legend."""
    return draw_panels([task_panel(r) for r in runs.values()], path, _seeds_note(list(runs.values())), columns)
