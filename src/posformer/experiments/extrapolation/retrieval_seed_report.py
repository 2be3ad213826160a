"""The retrieval table of `posformer extrapolate --preset retrieval --seeds N`: the one-seed table
(`retrieval_report`) with each cell the mean over seeds [95% Student-t interval] (the perplexity: the geometric
mean), and every pair of the rows that count compared seed by seed on the keys further back than L at each length
past L (`seeds.stats.compare`: ordered only when the interval of the per-seed difference excludes 0).

Over seeds a row counts, past L, when it retrieves at L in every seed (`retrieval_report.retrieves_at_l`).
"""

from __future__ import annotations

import math
from itertools import combinations

from posformer.experiments.extrapolation.retrieval_report import (
    REACH_COLUMNS,
    eval_set_of,
    header,
    measures,
    passkey_exact,
    retrieves_at_l,
)
from posformer.experiments.seeds.runs import rows_in_order, seed_runs
from posformer.experiments.seeds.stats import compare, exp_cell, spread
from posformer.experiments.tables import markdown_table

UNIT = (0.0, 1.0)


def scored_rows(record: dict) -> list[str]:
    """The rows every seed scored on retrieval, in the order of the run's rows (`seeds.runs.rows_in_order`)."""
    runs = seed_runs(record)
    ordered = rows_in_order(runs, record["config"].get("positions", []))
    return [row for row in ordered if all("retrieval" in run["rows"].get(row, {}) for run in runs)]


def seeds_retrieving(runs: list[dict], row: str, train_len: int, gate: float) -> int:
    """In how many seeds the row retrieves at L."""
    return sum(retrieves_at_l(run["rows"][row]["retrieval"], train_len, gate) for run in runs)


def _per_seed(runs: list[dict], row: str, length: int, tasks: list[str], eval_set: str) -> list[list[float | None]]:
    """measures x seeds: each measure of `retrieval_report.measures`, one value a seed."""
    found = [
        measures(run["rows"][row]["retrieval"], run["rows"][row]["ppl"].get(eval_set, {}), length, tasks)
        for run in runs
    ]
    return [list(values) for values in zip(*found)]


def _cell(values: list[float | None], counts: bool, log: bool = False) -> str:
    if any(v is None for v in values):
        return "-"
    if log:
        return exp_cell(spread([math.log(v) for v in values]))
    text = spread(values).cell(2, UNIT)
    return text if counts else f"({text})"


def table(record: dict) -> str:
    cfg, runs = record["config"], seed_runs(record)
    train_len, tasks, eval_set = cfg["train_len"], cfg["retrieval_tasks"], eval_set_of(runs[0])
    body = []
    for row in scored_rows(record):
        counts = seeds_retrieving(runs, row, train_len, cfg["retrieval_gate"]) == len(runs)
        for n in cfg["eval_lens"]:
            *values, ppl = _per_seed(runs, row, n, tasks, eval_set)
            cells = [_cell(v, counts or n == train_len) for v in values]
            body.append([row, str(n), *cells, _cell(ppl, True, log=True)])
    return markdown_table(header(cfg, eval_set), body)


def gate_line(record: dict) -> str:
    cfg, runs = record["config"], seed_runs(record)
    train_len, gate = cfg["train_len"], cfg["retrieval_gate"]
    found = []
    for row in scored_rows(record):
        at_l = spread([passkey_exact(run["rows"][row]["retrieval"]["passkey"][str(train_len)]) for run in runs])
        found.append(
            f"{row} in {seeds_retrieving(runs, row, train_len, gate)} of {len(runs)} (at L: {at_l.cell(2, UNIT)})"
        )
    return (
        f"Seeds in which each row retrieves at L = {train_len} (passkey exact match at least {gate:g} over every "
        f"depth): {'; '.join(found)}. A row counts past L only when it retrieves at L in every seed: the "
        "retrieval cells of the others are in parentheses past L."
    )


def pair_table(record: dict, length: int) -> str | None:
    """The rows that count, compared seed by seed on the passkey exact match of the keys further back than L at
    `length` (above 0: a retrieves more); None when fewer than two rows count or no key lies that far back."""
    cfg, runs = record["config"], seed_runs(record)
    train_len, far = cfg["train_len"], REACH_COLUMNS[2]
    gate = cfg["retrieval_gate"]
    counted = [r for r in scored_rows(record) if seeds_retrieving(runs, r, train_len, gate) == len(runs)]
    values = {
        row: [passkey_exact(run["rows"][row]["retrieval"]["passkey"][str(length)], far) for run in runs]
        for row in counted
    }
    ranked = sorted((r for r in counted if None not in values[r]), key=lambda r: -sum(values[r]))
    if len(ranked) < 2:
        return None
    body = []
    for a, b in combinations(ranked, 2):
        found = compare(values[a], values[b])
        body.append([f"{a} - {b}", found.difference.cell(2, (-1.0, 1.0), sign=True), found.verdict(a, b)])
    return markdown_table(
        [f"a - b: passkey exact match further back than L at {length}", "difference [95% interval]", "verdict"],
        body,
        align="lrl",
    )


def markdown(record: dict) -> list[str]:
    """The retrieval sections of results.md over seeds ([] when no row was scored on retrieval in every seed)."""
    if not scored_rows(record):
        return []
    cfg = record["config"]
    parts = [
        "## Retrieval beside perplexity, over seeds\n",
        f"Passkey: {cfg['retrieval_trials']} keys a length and depth, exact match over every depth, over the keys "
        f"within the last L = {cfg['train_len']} tokens and over those further back; the suite's tasks (depths "
        "averaged); each cell the mean over seeds [95% Student-t interval], the perplexity the geometric mean. `-`: "
        "no key lies there.\n",
        gate_line(record) + "\n",
        table(record) + "\n",
    ]
    for n in (n for n in cfg["eval_lens"] if n > cfg["train_len"]):
        pairs = pair_table(record, n)
        if pairs is not None:
            parts += [f"### Pairs seed by seed at {n}: the keys further back than L (above 0: a retrieves more)\n",
                      pairs + "\n"]  # fmt: skip
    return parts
