"""The tables of `posformer extend --seeds`: each seed's extension of its source (its own, with RUN naming
'{seed}'), summarised over seeds. At the target length: ppl / the source's ppl at L as the geometric mean over
seeds [95% Student-t interval], and the passkey exact match as the mean [interval]; then every paper's claim of
the one-seed report (`report.COMPARISONS`, `retrieval_claims.RETRIEVAL_COMPARISONS`) seed by seed: a claim is
called only when the interval of its per-seed difference excludes no difference.
"""

from __future__ import annotations

import math

from posformer.experiments.extension.report import COMPARISONS
from posformer.experiments.extension.retrieval_claims import RETRIEVAL_COMPARISONS
from posformer.experiments.seeds.runs import seed_runs
from posformer.experiments.seeds.stats import compare, exp_cell, spread
from posformer.experiments.tables import markdown_table

UNIT = (0.0, 1.0)


def _rows(runs: list[dict]) -> list[str]:
    return [row for row in runs[0]["rows"] if all("ppl" in run["rows"].get(row, {}) for run in runs)]


def _log_ppl(run: dict, row: str, eval_set: str, length: int) -> float:
    return math.log(run["rows"][row]["ppl"][eval_set][str(length)])


def passkey_at(run: dict, row: str, length: int) -> float | None:
    """The row's passkey exact match at `length`, averaged over the depths that fit (None: none fits)."""
    cells = [c for c in run["rows"][row].get("passkey", {}).get(str(length), {}).values() if c is not None]
    return sum(c["exact"] for c in cells) / len(cells) if cells else None


def summary_table(record: dict, eval_set: str) -> str:
    runs = seed_runs(record)
    cfg = runs[0]["config"]  # as each seed's run resolved it (train_len: the source's)
    target, train_len = cfg["target_len"], cfg["train_len"]
    body = []
    for row in _rows(runs):
        ratios = [_log_ppl(run, row, eval_set, target) - _log_ppl(run, "source", eval_set, train_len) for run in runs]
        passkeys = [passkey_at(run, row, target) for run in runs]
        passkey = "n/a" if None in passkeys else spread(passkeys).cell(2, UNIT)
        body.append([row, runs[0]["rows"][row]["stage"], exp_cell(spread(ratios), 3), passkey])
    return markdown_table(
        ["row", "stage", f"ppl({target}) / source ppl({train_len})", f"passkey exact match at {target}"], body
    )


def claims_table(record: dict, eval_set: str) -> str:
    """The perplexity claims (ratios at the target, below 1: the first row reads better) and the retrieval claims
    (passkey differences at the target, above 0: the first retrieves more), seed by seed."""
    runs = seed_runs(record)
    target = runs[0]["config"]["target_len"]
    rows, body = set(_rows(runs)), []
    for claim, a, b in COMPARISONS:
        if a in rows and b in rows:
            found = compare(
                [_log_ppl(r, a, eval_set, target) for r in runs], [_log_ppl(r, b, eval_set, target) for r in runs]
            )
            body.append([claim, f"ppl({a}) / ppl({b})", exp_cell(found.difference, 3), found.verdict(a, b, False)])
    for claim, a, b in RETRIEVAL_COMPARISONS:
        if a not in rows or b not in rows:
            continue
        mine, theirs = [passkey_at(r, a, target) for r in runs], [passkey_at(r, b, target) for r in runs]
        if None not in mine + theirs:
            found = compare(mine, theirs)
            difference = found.difference.cell(2, (-1.0, 1.0), sign=True)
            body.append([claim, f"passkey {a} - {b}", difference, found.verdict(a, b)])
    return markdown_table(["claim", "measure", f"at {target} [95% interval over seeds]", "verdict"], body)


def markdown(record: dict) -> str:
    """results.md of an extension over seeds."""
    cfg, seeds = seed_runs(record)[0]["config"], list(record["per_seed"])
    parts = [
        f"# Context extension over {len(seeds)} seeds ({', '.join(seeds)}): L={cfg['train_len']} -> "
        f"{cfg['target_len']}\n",
        f"Fine-tune: {cfg['steps']} steps of {cfg['batch_size']} x {cfg['target_len']} tokens, lr {cfg['lr']}; "
        f"passkey: {cfg['passkey_trials']} keys per cell. Sources: "
        + "; ".join(
            f"seed {s}: {run.get('source', {}).get('description', '?')}" for s, run in record["per_seed"].items()
        )
        + ".\n",
    ]
    for name in seed_runs(record)[0].get("data", {}).get("eval_sets", {}):
        parts += [
            f"## {name}: at the target length, over seeds\n",
            summary_table(record, name) + "\n",
            f"### {name}: the papers' claims, seed by seed\n",
            claims_table(record, name) + "\n",
        ]
    return "\n".join(parts)
