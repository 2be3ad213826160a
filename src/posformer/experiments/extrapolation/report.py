"""The extrapolation benchmark's report: markdown tables (perplexity and ppl(kL)/ppl(L)) and the plot."""

from __future__ import annotations

import os
from pathlib import Path


def _cell(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _header(lengths: list[int], train_len: int) -> list[str]:
    return ["row"] + [f"{n} ({n / train_len:g}L)" for n in lengths]


def _table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def ppl_table(results: dict, eval_set: str) -> str:
    """Rows = encodings (and RoPE scalings), columns = eval lengths: perplexity on `eval_set`."""
    cfg = results["config"]
    lengths = cfg["eval_lens"]
    body = [[row] + [_cell(r["ppl"][eval_set].get(str(n))) for n in lengths]
            for row, r in results["rows"].items() if eval_set in r["ppl"]]
    return _table(_header(lengths, cfg["train_len"]), body)


def ratio_table(results: dict, eval_set: str) -> str:
    """ppl(eval_len) / ppl(train_len): 1.00 = no degradation past the training length."""
    cfg = results["config"]
    lengths, train_len = cfg["eval_lens"], cfg["train_len"]
    body = []
    for row, r in results["rows"].items():
        ppl = r["ppl"].get(eval_set)
        if ppl is None:
            continue
        base = ppl.get(str(train_len))
        body.append([row] + [_cell(None if base is None or ppl.get(str(n)) is None else ppl[str(n)] / base)
                             for n in lengths])
    return _table(_header(lengths, train_len), body)


def eval_sets(results: dict) -> list[str]:
    seen: list[str] = []
    for r in results["rows"].values():
        seen += [s for s in r["ppl"] if s not in seen]
    return seen


def markdown(results: dict) -> str:
    """The whole results.md: setup line, then per evaluation set its perplexity and ratio tables."""
    cfg = results["config"]
    stride = f", stride {cfg['stride'] or cfg['train_len'] // 2}" if cfg["protocol"] == "sliding" else ""
    parts = [f"# Length extrapolation: train at L={cfg['train_len']}, evaluate up to "
             f"{max(cfg['eval_lens'])}\n",
             f"Model: decoder, d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} heads, "
             f"vocab {cfg['vocab_size']}; {cfg['steps']} steps of {cfg['batch_size']} x {cfg['train_len']} tokens. "
             f"Protocol: {cfg['protocol']}{stride}. Corpus: {cfg['corpus']}"
             + (f" (held out: {', '.join(results['data']['held_out'])})" if results["data"].get("held_out") else "")
             + ". `n/a`: the encoding cannot represent that length.\n"]
    for name in eval_sets(results):
        tokens = results["data"]["eval_sets"].get(name, {}).get("tokens")
        parts.append(f"## {name}: perplexity ({tokens:,} tokens per length)\n" if tokens else f"## {name}\n")
        parts.append(ppl_table(results, name) + "\n")
        parts.append(f"### {name}: ppl(kL) / ppl(L)\n")
        parts.append(ratio_table(results, name) + "\n")
    return "\n".join(parts)


def plot(results: dict, path: Path) -> Path:
    """ppl.png: perplexity against eval length (log2 x, log y), one line per row, one panel per eval set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = results["config"]
    sets = eval_sets(results)
    fig, axes = plt.subplots(1, max(1, len(sets)), figsize=(6.5 * max(1, len(sets)), 4.8), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, name in zip(axes[0], sets):
        for i, (row, r) in enumerate(results["rows"].items()):
            points = [(n, r["ppl"][name].get(str(n))) for n in cfg["eval_lens"] if name in r["ppl"]]
            points = [(n, v) for n, v in points if v is not None]
            if points:
                style = "--" if "+" in row else "-"
                ax.plot([n for n, _ in points], [v for _, v in points], style, marker="o", ms=3, label=row,
                        color=colors[i % len(colors)])
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
