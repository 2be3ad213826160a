"""The extrapolation benchmark's report: markdown tables (perplexity and ppl(kL)/ppl(L)) and the plot."""

from __future__ import annotations

import os
from pathlib import Path

from posformer.experiments.extrapolation.bootstrap import ppl_interval, ratio_interval


def _cell(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _header(lengths: list[int], train_len: int) -> list[str]:
    return ["row"] + [f"{n} ({n / train_len:g}L)" for n in lengths]


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def ppl_table(results: dict, eval_set: str) -> str:
    """Rows = encodings (and RoPE scalings), columns = eval lengths: perplexity on `eval_set`."""
    cfg = results["config"]
    lengths = cfg["eval_lens"]
    body = [
        [row] + [_cell(r["ppl"][eval_set].get(str(n))) for n in lengths]
        for row, r in results["rows"].items()
        if eval_set in r["ppl"]
    ]
    return markdown_table(_header(lengths, cfg["train_len"]), body)


def _blocks(record: dict, eval_set: str, length: int) -> tuple[list[float], list[int]] | None:
    found = record.get("blocks", {}).get(eval_set, {}).get(str(length))
    return None if found is None or len(found["nll"]) < 2 else (found["nll"], found["count"])


def ratio_interval_of(record: dict, eval_set: str, length: int, train_len: int) -> tuple[float, float] | None:
    """The 95% paired-bootstrap interval of ppl(length) / ppl(train_len), or None without per-block losses."""
    a, b = _blocks(record, eval_set, length), _blocks(record, eval_set, train_len)
    return None if a is None or b is None else ratio_interval(a, b)


def ppl_interval_of(record: dict, eval_set: str, length: int) -> tuple[float, float] | None:
    """The 95% bootstrap interval of the perplexity at `length`, or None without per-block losses."""
    found = _blocks(record, eval_set, length)
    return None if found is None else ppl_interval(*found)


def ratio_table(results: dict, eval_set: str) -> str:
    """ppl(eval_len) / ppl(train_len) [95% interval]: 1.00 = no degradation past the training length."""
    cfg = results["config"]
    lengths, train_len = cfg["eval_lens"], cfg["train_len"]
    body = []
    for row, r in results["rows"].items():
        ppl = r["ppl"].get(eval_set)
        if ppl is None:
            continue
        base = ppl.get(str(train_len))
        cells = [row]
        for n in lengths:
            if base is None or ppl.get(str(n)) is None:
                cells.append(_cell(None))
                continue
            interval = ratio_interval_of(r, eval_set, n, train_len) if n != train_len else None
            cells.append(
                _cell(ppl[str(n)] / base) + ("" if interval is None else f" [{interval[0]:.2f}, {interval[1]:.2f}]")
            )
        body.append(cells)
    return markdown_table(_header(lengths, train_len), body)


def eval_sets(results: dict) -> list[str]:
    seen: list[str] = []
    for r in results["rows"].values():
        seen += [s for s in r["ppl"] if s not in seen]
    return seen


def markdown(results: dict) -> str:
    """The whole results.md: setup line, then per evaluation set its perplexity and ratio tables."""
    cfg = results["config"]
    stride = f", stride {cfg['stride'] or cfg['train_len'] // 2}" if cfg["protocol"] == "sliding" else ""
    parts = [
        f"# Length extrapolation: train at L={cfg['train_len']}, evaluate up to {max(cfg['eval_lens'])}\n",
        f"Model: decoder, d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} heads, "
        f"vocab {cfg['vocab_size']}; {cfg['steps']} steps of {cfg['batch_size']} x {cfg['train_len']} tokens. "
        f"Protocol: {cfg['protocol']}{stride}. Corpus: {cfg['corpus']}"
        + (f" (held out: {', '.join(results['data']['held_out'])})" if results["data"].get("held_out") else "")
        + ". `n/a`: the encoding cannot represent that length.\n",
    ]
    for name in eval_sets(results):
        tokens = results["data"]["eval_sets"].get(name, {}).get("tokens")
        parts.append(f"## {name}: perplexity ({tokens:,} tokens per length)\n" if tokens else f"## {name}\n")
        parts.append(ppl_table(results, name) + "\n")
        unigram = results["data"].get("unigram_ppl", {}).get(name)
        if unigram is not None:
            parts.append(f"A unigram model (training-set token frequencies, no context) reads {unigram:.2f}.\n")
        parts.append(
            f"### {name}: ppl(kL) / ppl(L) [95% paired bootstrap interval over blocks of "
            f"{max(cfg['eval_lens'])} tokens]\n"
        )
        parts.append(ratio_table(results, name) + "\n")
    return "\n".join(parts)


def _first_run(results: dict) -> dict:
    return next(iter(results["per_seed"].values())) if "per_seed" in results else results


def _curves(results: dict, eval_set: str) -> dict[str, list[tuple[int, float, float | None, float | None]]]:
    """{row: [(length, ppl, band low, band high)]}: one run's perplexity with its 95% bootstrap interval over blocks;
    over seeds, the geometric mean with its 95% interval over seeds."""
    if "per_seed" in results:
        from posformer.experiments.extrapolation.seed_report import curves

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
    sets = eval_sets(_first_run(results))
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
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return path
