"""The retrieval table of one run of `posformer extrapolate --preset retrieval` (`retrieval`): for each row and eval
length, passkey exact match over every depth, over the keys within the last L tokens and over the keys further
back, the suite's tasks and the perplexity, beside each other; then each row's passkey by length and depth.

The gate: a row retrieves at L when its passkey exact match at L (over every depth) is at least `retrieval_gate`;
past L, the retrieval cells of a row that does not are shown in parentheses and do not count. Within the last L
tokens, a reader of its last L tokens can retrieve the key; further back it cannot (`passkey.key_reach`), so a
model that only reads its last L tokens scores in the first column and not in the second.
"""

from __future__ import annotations

from posformer.experiments.longeval.grid import task_scores
from posformer.experiments.tables import markdown_table

REACH_COLUMNS = (None, "near", "far")  # every key, the keys within the last L tokens, the keys further back
REACH_MARK = {"near": "n", "far": "f", "straddles": "s"}


def passkey_exact(cells: dict, reach: str | None = None) -> float | None:
    """The exact match over the keys of one length's passkey cells {depth: cell} whose key line lies at `reach`
    (None: every key); None when no key lies there."""
    hits = [
        hit
        for cell in cells.values()
        if cell is not None
        for hit, where in zip(cell["hits"], cell["reach"])
        if reach is None or where == reach
    ]
    return sum(hits) / len(hits) if hits else None


def retrieval_rows(results: dict) -> dict[str, dict]:
    """The rows scored on retrieval: {row: its "retrieval" record}."""
    return {row: r["retrieval"] for row, r in results["rows"].items() if "retrieval" in r}


def retrieves_at_l(scored: dict, train_len: int, gate: float) -> bool:
    """Whether a row's passkey exact match at L over every depth is at least `gate`."""
    found = passkey_exact(scored["passkey"][str(train_len)])
    return found is not None and found >= gate


def measures(scored: dict, ppl: dict, length: int, tasks: list[str]) -> list[float | None]:
    """One row at one length: passkey exact over every key, near and far keys, each task's exact match (its depths
    averaged), the perplexity (None where there is none)."""
    passkey = [passkey_exact(scored["passkey"][str(length)], reach) for reach in REACH_COLUMNS]
    by_task = task_scores({task: scored["suite"][task] for task in tasks})
    return passkey + [by_task[task].get(length) for task in tasks] + [ppl.get(str(length))]


def header(cfg: dict, eval_set: str) -> list[str]:
    """The table's header: row, length, the passkey columns, a column per task, the perplexity."""
    train_len = cfg["train_len"]
    return [
        "row",
        "length",
        "passkey: every depth",
        f"within the last {train_len}",
        "further back",
        *cfg["retrieval_tasks"],
        f"ppl ({eval_set})",
    ]


def eval_set_of(results: dict) -> str:
    """The evaluation set whose perplexity stands beside retrieval: the one the book haystacks come from."""
    found = results["data"].get("retrieval_haystack", {}).get("eval_set")
    return found or next(iter(next(iter(results["rows"].values()))["ppl"]))


def retrieval_table(results: dict) -> str:
    cfg = results["config"]
    train_len, tasks, eval_set = cfg["train_len"], cfg["retrieval_tasks"], eval_set_of(results)
    body = []
    for row, scored in retrieval_rows(results).items():
        counts = retrieves_at_l(scored, train_len, cfg["retrieval_gate"])
        ppl = results["rows"][row]["ppl"].get(eval_set, {})
        for n in cfg["eval_lens"]:
            values = measures(scored, ppl, n, tasks)
            cells = [_cell(v, counts or n == train_len) for v in values[:-1]]
            body.append([row, str(n), *cells, "n/a" if values[-1] is None else f"{values[-1]:.2f}"])
    return markdown_table(header(cfg, eval_set), body)


def _cell(value: float | None, counts: bool) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if counts else f"({value:.2f})"


def gate_line(results: dict) -> str:
    """Which rows retrieve at L, with their passkey exact match there."""
    cfg = results["config"]
    train_len, gate = cfg["train_len"], cfg["retrieval_gate"]
    scored = retrieval_rows(results)
    at_l = {row: passkey_exact(r["passkey"][str(train_len)]) for row, r in scored.items()}
    passed = [f"{row} {at_l[row]:.2f}" for row in scored if retrieves_at_l(scored[row], train_len, gate)]
    failed = [f"{row} {at_l[row]:.2f}" for row in scored if not retrieves_at_l(scored[row], train_len, gate)]
    return (
        f"Retrieves at L = {train_len} (passkey exact match at least {gate:g} over every depth): "
        f"{', '.join(passed) or 'no row'}. Does not: {', '.join(failed) or 'no row'}"
        + (": their retrieval cells past L are in parentheses and do not count." if failed else ".")
    )


def depth_table(results: dict, row: str) -> str:
    """Lengths x depths of one row: passkey exact match, and where its keys lie (n: within the last L tokens, f:
    further back, s: straddling the two, m: mixed)."""
    cfg = results["config"]
    grid = results["rows"][row]["retrieval"]["passkey"]

    def cell(found: dict | None) -> str:
        if found is None:
            return "n/a"
        marks = {REACH_MARK[where] for where in found["reach"]}
        return f"{found['exact']:.2f} {marks.pop() if len(marks) == 1 else 'm'}"

    body = [[str(n)] + [cell(grid[str(n)][str(float(d))]) for d in cfg["retrieval_depths"]] for n in cfg["eval_lens"]]
    return markdown_table(["length \\ depth"] + [f"{float(d):g}" for d in cfg["retrieval_depths"]], body)


def markdown(results: dict) -> list[str]:
    """The retrieval sections of results.md ([] when no row was scored on retrieval)."""
    if not retrieval_rows(results):
        return []
    cfg = results["config"]
    parts = [
        "## Retrieval beside perplexity\n",
        f"Passkey: {cfg['retrieval_trials']} keys a length and depth (depths "
        f"{', '.join(f'{float(d):g}' for d in cfg['retrieval_depths'])}), exact match; within the last "
        f"{cfg['train_len']}: the keys whose line lies within the prompt's last L tokens, further back: those whose "
        "line ends before the L tokens that end at the question's last token (a reader of its last L tokens can "
        "reach the first and not the second; a key straddling the two counts under every depth only). Suite tasks: "
        f"{cfg['retrieval_suite_trials']} prompts a length and depth, exact match, depths averaged. `-`: no key "
        "lies there.\n",
        gate_line(results) + "\n",
        retrieval_table(results) + "\n",
        "### Passkey by length and depth: exact match, and where the keys lie (n: within the last L tokens, f: "
        "further back, s: straddling, m: mixed)\n",
    ]
    for row in retrieval_rows(results):
        parts += [f"#### {row}\n", depth_table(results, row) + "\n"]
    return parts
