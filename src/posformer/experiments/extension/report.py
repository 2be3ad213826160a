"""The report of `posformer extend`: perplexity by length, passkey grids and the summary at the target length (its
figures: `extension.figure`)."""

from __future__ import annotations

from posformer.experiments.extension import suite_report
from posformer.experiments.extension.retrieval_claims import retrieval_claims_table
from posformer.experiments.extrapolation.bootstrap import ratio_interval
from posformer.experiments.extrapolation.report import ppl_interval_of
from posformer.experiments.tables import markdown_table

STAGE_NOTE = {
    "trained": "the trained model, RoPE unchanged",
    "eval-time": "the method's scaling, or its piecewise RoPE distance, on the trained weights",
    "fine-tuned": "the method's scaling, then fine-tuned at the target length",
    "recalibrated": "DroPE: RoPE dropped from every layer (its eval-time row: the trained weights without it), then "
    "trained at L and read at every length without scaling",
}


def mean_exact(grid: dict) -> float:
    """The passkey exact match averaged over the cells that fit (0 when none does)."""
    cells = [c["exact"] for by_depth in grid.values() for c in by_depth.values() if c is not None]
    return sum(cells) / len(cells) if cells else 0.0


def ratio_cell(ratio: float, a: dict, b: dict) -> str:
    """The ratio with its paired 95% bootstrap interval over the blocks {"nll", "count"} of a and b; the ratio alone
    when there is one block (the evaluation text holds a single window of the longest length)."""
    if len(a["nll"]) < 2:
        return f"{ratio:.3f}"
    low, high = ratio_interval((a["nll"], a["count"]), (b["nll"], b["count"]))
    return f"{ratio:.3f} [{low:.3f}, {high:.3f}]"


def _scored(results: dict) -> dict[str, dict]:
    return {row: r for row, r in results["rows"].items() if "ppl" in r}


def ppl_table(results: dict, eval_set: str) -> str:
    """Rows x eval lengths: perplexity [95% bootstrap interval]."""
    lengths = results["config"]["eval_lens"]
    body = []
    for row, r in _scored(results).items():
        cells = [row]
        for n in lengths:
            value, interval = r["ppl"][eval_set][str(n)], ppl_interval_of(r, eval_set, n)
            cells.append(f"{value:.3f}" + ("" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"))
        body.append(cells)
    return markdown_table(["row"] + [str(n) for n in lengths], body)


def summary_table(results: dict, eval_set: str) -> str:
    """At the target length: perplexity, its ratio to the source at L (paired interval), passkey at the target."""
    cfg = results["config"]
    target, train_len = str(cfg["target_len"]), cfg["train_len"]
    source = results["rows"]["source"]
    base = source["ppl"][eval_set][str(train_len)]
    body = []
    for row, r in _scored(results).items():
        ratio = r["ppl"][eval_set][target] / base
        a, b = r["blocks"][eval_set][target], source["blocks"][eval_set][str(train_len)]
        cell = ratio_cell(ratio, a, b)
        fitted = [c for c in r["passkey"].get(target, {}).values() if c is not None]
        passkey = (
            "n/a"
            if not fitted
            else (
                f"{sum(c['exact'] for c in fitted) / len(fitted):.2f} / "
                f"{sum(c['digits'] for c in fitted) / len(fitted):.2f}"
            )
        )
        body.append([row, r["stage"], f"{r['ppl'][eval_set][target]:.3f}", cell, passkey])
    return markdown_table(
        [
            "row",
            "stage",
            f"ppl at {target}",
            f"ppl({target}) / source ppl({train_len})",
            f"passkey at {target}: exact / digits",
        ],
        body,
    )


COMPARISONS = [  # (what the ratio tests, numerator row, denominator row): below 1 = the numerator reads better
    ("a short fine-tune vs eval-time scaling alone: PI", "pi+ft", "pi"),
    ("a short fine-tune vs eval-time scaling alone: NTK", "ntk+ft", "ntk"),
    ("a short fine-tune vs eval-time scaling alone: YaRN", "yarn+ft", "yarn"),
    ("a short fine-tune vs eval-time scaling alone: LongRoPE", "longrope+ft", "longrope"),
    ("after fine-tuning, YaRN vs NTK (YaRN paper: YaRN better)", "yarn+ft", "ntk+ft"),
    ("after fine-tuning, NTK vs PI (YaRN paper: NTK better)", "ntk+ft", "pi+ft"),
    ("after fine-tuning, LongRoPE vs YaRN", "longrope+ft", "yarn+ft"),
    ("eval-time, LongRoPE's searched factors vs YaRN", "longrope", "yarn"),
    ("PI fine-tuned vs plain extrapolation (the trained model)", "pi+ft", "source"),
    ("PI fine-tuned vs plain extrapolation fine-tuned (PI paper: PI better)", "pi+ft", "none+ft"),
    ("training-free, ReRoPE vs plain extrapolation (the trained model)", "rerope", "source"),
    ("training-free, Self-Extend vs plain extrapolation (the trained model)", "self_extend", "source"),
    ("training-free, dual chunk attention vs plain extrapolation (the trained model)", "dual_chunk", "source"),
    ("training-free, StreamingLLM vs plain extrapolation (the trained model)", "streaming", "source"),
    ("StreamingLLM's sinks vs window attention without them (StreamingLLM paper: sinks better)", "streaming", "window"),
    ("training-free, Self-Extend vs eval-time YaRN", "self_extend", "yarn"),
    ("DroPE: recalibration vs RoPE dropped alone", "drope+ft", "drope"),
    ("DroPE vs plain extrapolation (the trained model)", "drope+ft", "source"),
    ("DroPE vs eval-time YaRN (neither trained past L)", "drope+ft", "yarn"),
    ("DroPE vs YaRN fine-tuned at the target length", "drope+ft", "yarn+ft"),
    ("DroPE vs training-free Self-Extend", "drope+ft", "self_extend"),
]


def comparisons_table(results: dict, eval_set: str) -> str:
    """The papers' claims as paired ratios ppl(a) / ppl(b) at the target length [95% interval, same blocks]."""
    target = str(results["config"]["target_len"])
    rows = _scored(results)
    body = []
    for claim, a, b in COMPARISONS:
        if a not in rows or b not in rows:
            continue
        x, y = rows[a]["blocks"][eval_set][target], rows[b]["blocks"][eval_set][target]
        ratio = rows[a]["ppl"][eval_set][target] / rows[b]["ppl"][eval_set][target]
        body.append([claim, f"ppl({a}) / ppl({b})", ratio_cell(ratio, x, y)])
    return markdown_table(["claim", "ratio", f"at {target}"], body)


def passkey_table(results: dict, row: str) -> str:
    """Lengths x depths of one row: exact match / fraction of key tokens right (n/a: the prompt does not fit)."""
    cfg = results["config"]
    grid = results["rows"][row]["passkey"]

    def cell(value: dict | None) -> str:
        return "n/a" if value is None else f"{value['exact']:.2f} / {value['digits']:.2f}"

    body = [[str(n)] + [cell(grid[str(n)][str(d)]) for d in cfg["passkey_depths"]] for n in cfg["passkey_lengths"]]
    return markdown_table(["length \\ depth"] + [f"{d:g}" for d in cfg["passkey_depths"]], body)


def markdown(results: dict) -> str:
    cfg, source = results["config"], results.get("source", {})
    stages = {r.get("stage") for r in results["rows"].values()}
    recalibrated = [r for r in results["rows"].values() if r.get("stage") == "recalibrated" and "windows" in r]
    drope = (
        f"DroPE: {cfg['steps']} steps of {recalibrated[0]['windows']} x {cfg['train_len']} tokens. "
        if recalibrated
        else ""
    )
    parts = [
        f"# Context extension: L={cfg['train_len']} -> {cfg['target_len']}\n",
        f"Source: {source.get('description', '?')} ({source.get('parameters', 0):,} parameters). "
        f"Fine-tune: {cfg['steps']} steps of {cfg['batch_size']} x {cfg['target_len']} tokens, lr {cfg['lr']}. "
        f"{drope}Passkey: {cfg['passkey_trials']} keys per cell. Rows: "
        + "; ".join(
            f"{stage}: {note}" for stage, note in STAGE_NOTE.items() if stage != "recalibrated" or stage in stages
        )
        + ".\n",
    ]
    rows = _scored(results)
    for name in results.get("data", {}).get("eval_sets", {}):
        if not rows or name not in next(iter(rows.values()))["ppl"]:
            continue
        parts += [
            f"## {name}: at the target length\n",
            summary_table(results, name) + "\n",
            f"### {name}: the papers' claims, paired (below 1: the first row reads better)\n",
            comparisons_table(results, name) + "\n",
            f"## {name}: perplexity by length [95% bootstrap interval]\n",
            ppl_table(results, name) + "\n",
        ]
    for beyond, which in ((False, "every depth"), (True, f"the keys more than L = {cfg['train_len']} tokens back")):
        claims = retrieval_claims_table(results, beyond)
        if claims:
            parts += [
                f"## The papers' retrieval claims, paired: passkey exact match of one row minus another's, {which} "
                "[95% bootstrap interval over the keys]\n",
                claims + "\n",
            ]
    parts.append("## Passkey retrieval by length and depth: exact match / fraction of key tokens right\n")
    for row in rows:
        parts += [f"### {row}\n", passkey_table(results, row) + "\n"]
    searched = [r["longrope_search"] for r in results["rows"].values() if r.get("longrope_search")]
    if searched:
        found = searched[0]
        parts.append(
            f"LongRoPE search: {found['evaluated']} candidates, best ppl by generation "
            f"{', '.join(f'{p:.3f}' for p in found['history'])}; long factors "
            f"{', '.join(f'{v:.2f}' for v in found['long_factor'])}.\n"
        )
    parts += [recipe_line(r) for r in results["rows"].values() if r.get("stages") or r.get("short_search")]
    chosen = [f"{row}: {_params(r['method_params'])}" for row, r in results["rows"].items() if r.get("method_params")]
    if chosen:
        parts.append(f"Piecewise RoPE distances, parameters from L and the target: {'; '.join(chosen)}.\n")
    return "\n".join(parts + suite_report.markdown(results))


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def recipe_line(row: dict) -> str:
    """What LongRoPE's progressive extension and readjustment did in the fine-tuned row `row`."""
    steps = [
        f"searched at {st['length']} (best ppl {st['ppl']:.3f}), fine-tuned {st['steps']} steps there"
        for st in row.get("stages", [])
    ]
    final = row.get("longrope_search")
    if final:
        steps.append(f"searched again at {final['length']} from that model (best ppl {final['ppl']:.3f})")
    steps.append(
        f"fine-tuned at the target (final loss {row['final_loss']:.3f})"
        if row.get("final_loss") is not None
        else "fine-tuned at the target"
    )
    short = row.get("short_search")
    if short:
        steps.append(
            f"short factors searched at L: ppl at L on training text {short['unadjusted_ppl']:.3f} with "
            f"factors 1, {short['ppl']:.3f} with {', '.join(f'{v:.2f}' for v in short['short_factor'])}"
        )
    return "LongRoPE recipe: " + "; ".join(steps) + ".\n"
