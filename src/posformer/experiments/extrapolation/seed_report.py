"""The tables of a language-model extrapolation over several seeds (`posformer extrapolate --seeds N`).

Per evaluation set: the perplexity at each length and the ratio ppl(kL) / ppl(L), each as the geometric mean
over seeds with its 95% Student-t interval (taken on the log scale, `seeds.stats`); then every pair of encodings
compared seed by seed by its perplexity at L and by the ratio at the first length past L and at the longest
(each eval-time scaling against its plain row too, and every encoding against RoPE with eval-time YaRN): a pair is
ordered only when the interval of its per-seed log-ratio difference excludes 0.
"""

from __future__ import annotations

import math
from itertools import combinations

from posformer.experiments.extrapolation import retrieval_seed_report
from posformer.experiments.extrapolation.report import eval_sets
from posformer.experiments.seeds.runs import rows_in_order, seed_runs
from posformer.experiments.seeds.stats import compare, exp_cell, spread
from posformer.experiments.tables import markdown_table

BASELINE = "rope+yarn"  # what a new encoding is compared with past L (PoPE, HoPE and the YaRN paper do)


def _log_values(runs: list[dict], row: str, eval_set: str, length: int, train_len: int | None) -> list[float] | None:
    """log ppl(length) (over ppl(train_len) when given) of `row` in each seed; None where a seed has no value."""
    found = []
    for run in runs:
        ppl = run["rows"].get(row, {}).get("ppl", {}).get(eval_set, {})
        value, base = ppl.get(str(length)), 1.0 if train_len is None else ppl.get(str(train_len))
        if value is None or base is None:
            return None
        found.append(math.log(value / base))
    return found


def _rows(record: dict, eval_set: str) -> list[str]:
    """The rows every seed scored on `eval_set`, in the order of the run's rows (`seeds.runs.rows_in_order`)."""
    runs = seed_runs(record)
    ordered = rows_in_order(runs, record["config"].get("positions", []))
    return [row for row in ordered if all(eval_set in run["rows"].get(row, {}).get("ppl", {}) for run in runs)]


def _table(record: dict, eval_set: str, ratio: bool) -> str:
    runs, cfg = seed_runs(record), record["config"]
    lengths, train_len = cfg["eval_lens"], cfg["train_len"]
    body = []
    for row in _rows(record, eval_set):
        cells = [row]
        for n in lengths:
            values = _log_values(runs, row, eval_set, n, train_len if ratio else None)
            cells.append("n/a" if values is None else exp_cell(spread(values)))
        body.append(cells)
    return markdown_table(["row"] + [f"{n} ({n / train_len:g}L)" for n in lengths], body)


def curves(record: dict, eval_set: str) -> dict[str, list[tuple[int, float, float, float]]]:
    """{row: [(length, geometric mean ppl, low, high)]} over seeds (95%), the lengths every seed could score."""
    runs, lengths = seed_runs(record), record["config"]["eval_lens"]
    found = {}
    for row in _rows(record, eval_set):
        points = []
        for n in lengths:
            values = _log_values(runs, row, eval_set, n, None)
            if values is not None:
                middle = spread(values)
                low, high = middle.interval or (middle.mean, middle.mean)
                points.append((n, math.exp(middle.mean), math.exp(low), math.exp(high)))
        found[row] = points
    return found


def pair_table(record: dict, eval_set: str, length: int) -> str:
    """Every pair of encodings (best first by the geometric mean over seeds) compared seed by seed by
    ppl(length) / ppl(L), then each eval-time scaling against its plain row (rope+yarn against rope) and every
    other encoding against rope+yarn; at `length` = L, the encodings by their perplexity at L."""
    runs, train_len = seed_runs(record), record["config"]["train_len"]
    at_l = length == train_len
    base = None if at_l else train_len
    logs = {row: _log_values(runs, row, eval_set, length, base) for row in _rows(record, eval_set)}
    ranked = sorted((row for row in logs if logs[row] is not None), key=lambda row: sum(logs[row]))
    plain = [row for row in ranked if "+" not in row]
    pairs = list(combinations(plain, 2))
    if not at_l:
        pairs += [(row, row.split("+")[0]) for row in ranked if "+" in row and row.split("+")[0] in logs]
        if BASELINE in logs:  # the papers' baseline past L: RoPE with YaRN at eval time
            pairs += [(row, BASELINE) for row in plain if row != BASELINE.split("+")[0]]
    measure = f"ppl({length})" + ("" if at_l else f" / ppl({train_len})")
    body = []
    for a, b in pairs:
        found = compare(logs[a], logs[b])
        body.append([f"{a} / {b}", exp_cell(found.difference, 3), found.verdict(a, b, higher_is_better=False)])
    return markdown_table([f"a / b: {measure} of a over b's", "ratio [95% interval]", "verdict"], body, align="lrl")


def _pair_sections(record: dict, eval_set: str) -> list[str]:
    """The pair tables at L, at the first length past L and at the longest."""
    lengths, train_len = record["config"]["eval_lens"], record["config"]["train_len"]
    past = [n for n in lengths if n > train_len]
    parts = [
        f"### {eval_set}: pairs seed by seed at L = {train_len} (below 1: a reads better)\n",
        pair_table(record, eval_set, train_len) + "\n",
    ]
    for n in sorted({past[0], past[-1]}) if past else []:
        parts += [
            f"### {eval_set}: pairs seed by seed at {n} = {n / train_len:g}L (below 1: a degrades less)\n",
            pair_table(record, eval_set, n) + "\n",
        ]
    return parts


def markdown(record: dict) -> str:
    """results.md of a language-model extrapolation over seeds, retrieval last (`retrieval_seed_report`)."""
    cfg, seeds = record["config"], list(record["per_seed"])
    parts = [
        f"# Length extrapolation over {len(seeds)} seeds ({', '.join(seeds)}): train at L={cfg['train_len']}, "
        f"evaluate up to {max(cfg['eval_lens'])}\n",
        f"Model: decoder, d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} heads, vocab "
        f"{cfg['vocab_size']}; {cfg['steps']} steps of {cfg['batch_size']} x {cfg['train_len']} tokens; protocol "
        f"{cfg['protocol']}; corpus {cfg['corpus']}. Each cell: the geometric mean over seeds [95% Student-t "
        "interval over seeds]. `n/a`: the encoding cannot represent that length.\n",
    ]
    for name in eval_sets(seed_runs(record)[0]):
        parts += [
            f"## {name}: perplexity\n",
            _table(record, name, ratio=False) + "\n",
            f"### {name}: ppl(kL) / ppl(L)\n",
            _table(record, name, ratio=True) + "\n",
            *_pair_sections(record, name),
        ]
    return "\n".join(parts + retrieval_seed_report.markdown(record))
