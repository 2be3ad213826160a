"""The long-context suite in `posformer extend`'s report: each row's exact match by task and length, the effective
lengths under one rule (`extension.suite`), a heatmap per row (suite.png) and a bar chart of the effective lengths
(effective_length.png)."""

from __future__ import annotations

from pathlib import Path

from posformer.experiments.extension.suite import common_means, effective_lengths
from posformer.experiments.longeval.grid import task_scores
from posformer.experiments.tables import markdown_table

PANELS_PER_LINE = 4


def suite_rows(results: dict) -> dict[str, dict]:
    """The rows that hold a suite grid, in the report's order."""
    return {row: r for row, r in results["rows"].items() if r.get("suite")}


def _effective(results: dict) -> tuple[float | None, dict]:
    cfg = results["config"]
    return effective_lengths(results["rows"], cfg["train_len"], cfg["suite_threshold"])


def effective_table(results: dict) -> str:
    """Rows: the mean suite exact match at each length where every task fits, and the effective length."""
    rows = suite_rows(results)
    _, found = _effective(results)
    lengths = sorted({n for r in rows.values() for n in common_means(r["suite"])})
    body = []
    for row, r in rows.items():
        means = common_means(r["suite"])
        length = found.get(row)
        body.append([row] + [f"{means[n]:.2f}" if n in means else "n/a" for n in lengths] + [str(length or "< all")])
    return markdown_table(["row"] + [str(n) for n in lengths] + ["effective length"], body)


def task_table(results: dict, row: str) -> str:
    """Tasks x lengths of one row: exact match averaged over depths (n/a: the prompt does not fit)."""
    scores = task_scores(results["rows"][row]["suite"])
    lengths = results["config"]["passkey_lengths"]
    body = [[task] + [f"{by_n[n]:.2f}" if n in by_n else "n/a" for n in lengths] for task, by_n in scores.items()]
    return markdown_table(["task \\ length"] + [str(n) for n in lengths], body)


def markdown(results: dict) -> list[str]:
    """The report's suite section (empty when no row was scored on the suite)."""
    rows = suite_rows(results)
    if not rows:
        return []
    cfg = results["config"]
    score, _ = _effective(results)
    rule = (
        "the source was not scored at train_len"
        if score is None
        else f"the longest length up to which the mean exceeds {cfg['suite_threshold']:g} x the source's mean at "
        f"L={cfg['train_len']} = {score:.3f} at every length"
    )
    parts = [
        "## Long-context suite: mean exact match by length, effective length\n",
        f"{cfg['suite_trials']} prompts per task, length and depth (`posformer longeval`'s evaluation split). "
        f"Effective length: {rule}.\n",
        effective_table(results) + "\n",
    ]
    for row in rows:
        parts += [f"### suite, {row}: exact match by task and length\n", task_table(results, row) + "\n"]
    return parts


def plot_suite(results: dict, path: Path) -> Path:
    """One heatmap per row: exact match, lengths (x) by tasks (y); blank cells do not fit."""
    import numpy as np

    from posformer.utils.figure import pyplot, save_png

    plt = pyplot()
    rows = suite_rows(results)
    lengths = results["config"]["passkey_lengths"]
    columns = min(PANELS_PER_LINE, len(rows))
    lines = -(-len(rows) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(2.8 * columns + 1, 3.0 * lines), squeeze=False)
    for ax in axes.flat[len(rows) :]:
        ax.set_visible(False)
    image = None
    for ax, (row, r) in zip(axes.flat, rows.items()):
        scores = task_scores(r["suite"])
        tasks = list(scores)
        grid = np.array([[scores[t].get(n, np.nan) for n in lengths] for t in tasks])
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], rotation=45, fontsize=7)
        ax.set_yticks(range(len(tasks)), tasks, fontsize=6)
        ax.set_title(row, fontsize=9)
    fig.tight_layout()
    fig.colorbar(image, ax=axes.ravel().tolist(), label="exact match", shrink=0.8)
    return save_png(fig, path)


def plot_effective(results: dict, path: Path) -> Path:
    """A bar per row: its effective length (0 when even the shortest length is below the threshold)."""
    from posformer.utils.figure import pyplot, save_png

    plt = pyplot()
    score, found = _effective(results)
    rows = list(found)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(rows) + 1), 3.6))
    ax.bar(range(len(rows)), [found[r] or 0 for r in rows], color="tab:blue")
    ax.set_xticks(range(len(rows)), rows, rotation=45, ha="right", fontsize=8)
    ax.set_yscale("log", base=2)
    ax.set_ylabel("effective length (tokens)")
    ax.set_title(f"effective length: mean > {score:.3f}" if score is not None else "effective length")
    fig.tight_layout()
    return save_png(fig, path)
