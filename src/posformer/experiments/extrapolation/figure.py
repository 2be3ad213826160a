"""The extrapolation benchmark's figure, ppl.png: perplexity against evaluation length per row, with 95% bands
(one run: the bootstrap over blocks; over seeds: the interval over seeds)."""

from __future__ import annotations

from pathlib import Path

from posformer.experiments.extrapolation.report import eval_sets, ppl_interval_of
from posformer.experiments.extrapolation.seed_report import curves
from posformer.experiments.seeds.runs import is_over_seeds, seed_runs
from posformer.utils.safe_write import replacing


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
    """ppl.png: perplexity against eval length (log2 x, log y), one line per row with its 95% band (of one run:
    the bootstrap over blocks; over seeds: the interval over seeds), one panel per eval set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = results["config"]
    sets = eval_sets(seed_runs(results)[0] if is_over_seeds(results) else results)
    fig, axes = plt.subplots(1, max(1, len(sets)), figsize=(6.5 * max(1, len(sets)), 4.8), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, name in zip(axes[0], sets):
        for i, (row, points) in enumerate(_curves(results, name).items()):
            if points:
                color = colors[i % len(colors)]
                lengths = [p[0] for p in points]
                ax.plot(
                    lengths,
                    [p[1] for p in points],
                    "--" if "+" in row else "-",
                    marker="o",
                    ms=3,
                    label=row,
                    color=color,
                )
                banded = [p for p in points if p[2] is not None]
                if banded:
                    ax.fill_between(
                        [p[0] for p in banded],
                        [p[2] for p in banded],
                        [p[3] for p in banded],
                        color=color,
                        alpha=0.15,
                        lw=0,
                    )
        ax.axvline(cfg["train_len"], color="grey", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_xticks(cfg["eval_lens"], [str(n) for n in cfg["eval_lens"]])
        ax.set_yscale("log")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel(f"perplexity ({cfg['protocol']})")
        ax.set_title(f"{name}: trained at L={cfg['train_len']}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
    return path
