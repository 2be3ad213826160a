"""The extrapolation benchmark's figure, ppl.png: perplexity against evaluation length per row, each point with its
95% interval as an error bar (one run: the bootstrap over blocks; over seeds: the interval over seeds).

A dozen rows' intervals overlap where the rows agree (at and near L): filled bands there blend into one blot, so
each row's points are drawn a little apart along x with thin bars (`utils.figure.draw_interval_lines`)."""

from __future__ import annotations

from pathlib import Path

from posformer.experiments.extrapolation.report import eval_sets, ppl_interval_of
from posformer.experiments.extrapolation.seed_report import curves
from posformer.experiments.seeds.runs import is_over_seeds, seed_runs
from posformer.utils.figure import REFERENCE_COLOR, draw_interval_lines, line_style, pyplot, save_png


def _curves(results: dict, eval_set: str) -> dict[str, list[tuple[int, float, float | None, float | None]]]:
    """{row: [(length, ppl, band low, band high)]}: one run's perplexity with its 95% bootstrap interval over blocks;
    over seeds, the geometric mean with its 95% interval over seeds."""
    if is_over_seeds(results):
        return curves(results, eval_set)
    found = {}
    for row, r in results["rows"].items():
        if eval_set not in r["ppl"]:
            continue
        points = [(n, r["ppl"][eval_set].get(str(n))) for n in results["config"]["eval_lens"]]
        bands = [(n, v, ppl_interval_of(r, eval_set, n)) for n, v in points if v is not None]
        found[row] = [(n, v, *(band or (None, None))) for n, v, band in bands]
    return found


def plot(results: dict, path: Path) -> Path:
    """ppl.png: perplexity against eval length (log2 x, log y with plain labels), one line per row with a 95%
    error bar at each point (of one run: the bootstrap over blocks; over seeds: the interval over seeds), one
    panel per eval set."""
    cfg = results["config"]
    over_seeds = is_over_seeds(results)
    sets = eval_sets(seed_runs(results)[0] if over_seeds else results)
    bars = (
        f"geometric mean of {len(seed_runs(results))} seeds, bars: 95% interval over seeds"
        if over_seeds
        else "bars: 95% bootstrap interval over blocks"
    )
    curves = {name: _curves(results, name) for name in sets}
    return draw_sets(curves, cfg["train_len"], cfg["eval_lens"], cfg["protocol"], bars, path)


def draw_sets(
    curves: dict[str, dict[str, list[tuple[int, float, float | None, float | None]]]],
    train_len: int,
    eval_lens: list[int],
    protocol: str,
    bars: str,
    path: str | Path,
) -> Path:
    """One panel per eval set of {set: {row: [(length, ppl, low, high)]}}, as `plot` draws a run; `bars`: what the
    error bars are, for the title."""
    plt = pyplot()
    panels = max(1, len(curves))
    fig, axes = plt.subplots(1, panels, figsize=(6.0 * panels + 2.0, 5.0), squeeze=False, layout="constrained")
    names = list(dict.fromkeys(row for rows in curves.values() for row, points in rows.items() if points))
    styles = {row: line_style(i) for i, row in enumerate(names)}  # a row looks the same in every panel
    dodge = any(p[2] is not None for rows in curves.values() for points in rows.values() for p in points)
    shifted = False
    for ax, (name, rows) in zip(axes[0], curves.items()):
        shifted |= draw_interval_lines(ax, rows, styles, dodge)
        ax.axvline(train_len, color=REFERENCE_COLOR, lw=1.0, ls=":", label=f"training length L = {train_len}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(eval_lens, [f"{n:,}" for n in eval_lens])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_yscale("log")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel(f"perplexity ({protocol})")
        ax.set_title(f"{name}: trained at L={train_len}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(
        f"Perplexity against evaluation length\n({bars}{'; rows shifted slightly along x' if shifted else ''})"
    )
    return save_png(fig, path)
