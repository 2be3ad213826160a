"""The figures of `posformer extend`, in the house style of `utils.figure`:

  ppl.png             perplexity against length, one line per row with its 95% bootstrap interval as error bars;
                      one colour and marker per method, the line per stage (eval-time: dashed, hollow markers)
  passkey.png         one heatmap per row: passkey exact match, lengths by depths, one colour bar
  suite.png           one heatmap per row: the long-context suite's exact match, lengths by tasks, one colour bar
  effective_length.png  each row's effective length on the suite, a dot per row

A heatmap cell whose prompt does not fit the length is grey (`MISSING_COLOR`), not a colour of the scale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posformer.experiments.extension.suite import effective_lengths
from posformer.experiments.extension.suite_report import suite_rows
from posformer.experiments.extrapolation.report import ppl_interval_of
from posformer.experiments.longeval.grid import task_scores
from posformer.utils.figure import (
    LINE_STYLES,
    MARKERS,
    MISSING_COLOR,
    PALETTE,
    REFERENCE_COLOR,
    draw_interval_lines,
    label_outer_panels,
    panel_grid,
    pyplot,
    save_png,
    shared_colorbar,
)

PANELS_PER_LINE = 4
HEATMAP_PANEL = (3.0, 2.8)  # inches of one heatmap panel
# the line of each stage of a row (its method sets colour and marker); eval-time rows: hollow markers
STAGE_LINES = {"trained": "-", "eval-time": "--", "fine-tuned": "-", "recalibrated": "-."}
STAGE_KEY = {  # the legend's title: what each stage's line means, for the stages the figure holds
    "trained": "solid: the source, or fine-tuned at the target",
    "eval-time": "dashed, hollow markers: eval-time only",
    "recalibrated": "dash-dot: DroPE, recalibrated at L",
}


def _scored(results: dict) -> dict[str, dict]:
    return {row: r for row, r in results["rows"].items() if "ppl" in r}


def row_style(methods: list, row: dict) -> dict:
    """Keyword arguments of `Axes.plot` for a row: its method's colour and marker (`methods`: every method, the
    source's None first), its stage's line; eval-time rows get hollow markers."""
    index = methods.index(row["method"]) if row["method"] in methods else len(methods)
    stage = row.get("stage", "trained")
    return {
        "color": PALETTE[index % len(PALETTE)],
        "marker": MARKERS[index % len(MARKERS)],
        "linestyle": STAGE_LINES.get(stage, LINE_STYLES[-1]),
        "fillstyle": "none" if stage == "eval-time" else "full",
    }


def plot_ppl(results: dict, path: Path) -> Path:
    """ppl.png: perplexity against length (log2 x, log y with plain labels), a line per row with 95% error bars
    (the bootstrap over blocks), one panel per eval set, L and the target length marked."""
    plt = pyplot()
    cfg = results["config"]
    rows = _scored(results)
    sets = [s for s in results.get("data", {}).get("eval_sets", {}) if rows and s in next(iter(rows.values()))["ppl"]]
    panels = max(1, len(sets))
    fig, axes = plt.subplots(1, panels, figsize=(6.0 * panels + 2.5, 5.0), squeeze=False, layout="constrained")
    methods = [None] + list(cfg["methods"])
    styles = {row: row_style(methods, r) for row, r in rows.items()}
    lengths = cfg["eval_lens"]
    for ax, name in zip(axes[0], sets):
        curves = {}
        for row, r in rows.items():
            points = [(n, r["ppl"][name][str(n)], ppl_interval_of(r, name, n)) for n in lengths]
            curves[row] = [(n, v, *(band or (None, None))) for n, v, band in points if v is not None]
        draw_interval_lines(ax, curves, styles)
        ax.axvline(cfg["train_len"], color=REFERENCE_COLOR, lw=1.0, ls=":", label=f"trained at L = {cfg['train_len']}")
        ax.axvline(cfg["target_len"], color=REFERENCE_COLOR, lw=1.0, ls="--", label=f"target {cfg['target_len']}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lengths, [f"{n:,}" for n in lengths])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel("perplexity")
        ax.set_title(f"{name}: L = {cfg['train_len']} extended to {cfg['target_len']}")
        ax.grid(True, which="both", alpha=0.3)
    stages = {STAGE_KEY.get(r.get("stage"), STAGE_KEY["trained"]) for r in rows.values()}
    key = "\n".join(note for note in STAGE_KEY.values() if note in stages)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title=key, alignment="left")
    fig.suptitle("Perplexity against evaluation length (bars: 95% bootstrap interval over blocks)")
    return save_png(fig, path)


def _heatmaps(plt, grids: dict[str, np.ndarray], lengths: list[int], y_labels: dict[str, list[str]], ylabel: str):
    """One exact-match heatmap per row ({row: (len(y), len(lengths))}, NaN: no value) on one 0-1 scale; returns
    the figure."""
    columns = min(PANELS_PER_LINE, len(grids))
    fig, axes = panel_grid(plt, len(grids), columns, HEATMAP_PANEL)
    shared_y = len({tuple(labels) for labels in y_labels.values()}) == 1
    image = None
    for k, (ax, (row, grid)) in enumerate(zip(axes, grids.items())):
        ax.set_facecolor(MISSING_COLOR)
        image = ax.imshow(grid, vmin=0, vmax=1, aspect="auto", origin="lower", interpolation="nearest")
        ax.set_xticks(range(len(lengths)), [f"{n:,}" for n in lengths], rotation=45 if len(lengths) > 4 else 0)
        ax.set_yticks(range(len(y_labels[row])), y_labels[row] if k % columns == 0 or not shared_y else [])
        ax.set_title(row)
    label_outer_panels(axes, columns, "length (tokens)", ylabel)
    shared_colorbar(fig, image, axes, "exact match")
    return fig


def plot_passkey(results: dict, path: Path) -> Path:
    """passkey.png: one heatmap per row, passkey exact match, lengths (x) by depths (y); grey: does not fit."""
    cfg = results["config"]
    rows = _scored(results)
    lengths, depths = cfg["passkey_lengths"], cfg["passkey_depths"]
    grids = {
        row: np.array(
            [
                [
                    np.nan if r["passkey"][str(n)][str(d)] is None else r["passkey"][str(n)][str(d)]["exact"]
                    for n in lengths
                ]
                for d in depths
            ]
        )
        for row, r in rows.items()
    }
    depth_labels = [f"{d:.0%}" for d in depths]
    plt = pyplot()
    fig = _heatmaps(plt, grids, lengths, dict.fromkeys(grids, depth_labels), "depth of the key in the text")
    fig.suptitle(f"Passkey retrieval, exact match over {cfg['passkey_trials']} keys a cell (grey: does not fit)")
    return save_png(fig, path)


def plot_suite(results: dict, path: Path) -> Path:
    """suite.png: one heatmap per row scored on the suite, exact match averaged over depths, lengths (x) by tasks
    (y); grey: the task's prompt does not fit."""
    lengths = results["config"]["passkey_lengths"]
    grids, tasks = {}, {}
    for row, r in suite_rows(results).items():
        scores = task_scores(r["suite"])
        tasks[row] = list(scores)
        grids[row] = np.array([[scores[t].get(n, np.nan) for n in lengths] for t in tasks[row]])
    plt = pyplot()
    fig = _heatmaps(plt, grids, lengths, tasks, "task")
    fig.suptitle("Long-context suite: exact match by task and length, mean over depths (grey: does not fit)")
    return save_png(fig, path)


def plot_effective(results: dict, path: Path) -> Path:
    """effective_length.png: a dot per row at its effective length on the suite (log2 axis); a row below the
    threshold at every length, or a run whose source was not scored at L, is written out in words."""
    cfg = results["config"]
    score, found = effective_lengths(results["rows"], cfg["train_len"], cfg["suite_threshold"])
    lengths = sorted(cfg["passkey_lengths"])
    plt = pyplot()
    rows = list(found)
    fig, ax = plt.subplots(figsize=(6.5, max(2.5, 0.4 * len(rows) + 1.5)), layout="constrained")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [f"{n:,}" for n in lengths])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlim(lengths[0] / 1.5, lengths[-1] * 1.5)
    ax.set_xlabel("effective length (tokens)")
    if score is None:
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            f"no effective length: the threshold is relative to the source's\nmean at L = {cfg['train_len']}, and "
            "not every task was scored there",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_title("Effective length on the long-context suite")
        return save_png(fig, path)
    y = list(range(len(rows)))[::-1]
    reached = [(yi, found[row]) for yi, row in zip(y, rows) if found[row]]
    if reached:
        ax.hlines([yi for yi, _ in reached], lengths[0] / 1.5, [n for _, n in reached], color=PALETTE[0], lw=1.0)
        ax.plot([n for _, n in reached], [yi for yi, _ in reached], "o", color=PALETTE[0], ls="none")
    for yi, row in zip(y, rows):
        if not found[row]:
            ax.text(lengths[0], yi, "below the threshold at every length", va="center", color=REFERENCE_COLOR)
    ax.set_yticks(y, rows)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(
        f"Effective length: mean exact match above {score:.3f}\n"
        f"({cfg['suite_threshold']:g} x the source's mean at L = {cfg['train_len']})"
    )
    return save_png(fig, path)
