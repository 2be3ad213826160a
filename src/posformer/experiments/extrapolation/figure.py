"""The extrapolation benchmark's figure, ppl.png: perplexity against evaluation length per row, each point with its
95% interval as an error bar (one run: the bootstrap over blocks; over seeds: the interval over seeds).

A dozen rows' intervals overlap where the rows agree (at and near L): filled bands there blend into one blot, so
each row's points are drawn a little apart along x with thin bars (`utils.figure.draw_interval_lines`)."""

from __future__ import annotations

from pathlib import Path

from posformer.experiments.extrapolation.report import eval_sets, ppl_interval_of
from posformer.experiments.extrapolation.seed_report import curves
from posformer.experiments.seeds.runs import is_over_seeds, seed_runs
from posformer.utils.figure import REFERENCE_COLOR, draw_interval_lines, pyplot, save_png


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
    plt = pyplot()
    cfg = results["config"]
    over_seeds = is_over_seeds(results)
    sets = eval_sets(seed_runs(results)[0] if over_seeds else results)
    panels = max(1, len(sets))
    fig, axes = plt.subplots(1, panels, figsize=(6.0 * panels + 2.0, 5.0), squeeze=False, layout="constrained")
    for ax, name in zip(axes[0], sets):
        draw_interval_lines(ax, _curves(results, name))
        ax.axvline(
            cfg["train_len"], color=REFERENCE_COLOR, lw=1.0, ls=":", label=f"training length L = {cfg['train_len']}"
        )
        ax.set_xscale("log", base=2)
        ax.set_xticks(cfg["eval_lens"], [f"{n:,}" for n in cfg["eval_lens"]])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_yscale("log")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel(f"perplexity ({cfg['protocol']})")
        ax.set_title(f"{name}: trained at L={cfg['train_len']}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    bars = (
        f"geometric mean of {len(seed_runs(results))} seeds, bars: 95% interval over seeds"
        if over_seeds
        else "bars: 95% bootstrap interval over blocks"
    )
    fig.suptitle(f"Perplexity against evaluation length\n({bars}; rows shifted slightly along x)")
    return save_png(fig, path)
