"""The long-context suite in `posformer extend`'s report: each row's exact match by task and length and the effective
lengths under one rule (`extension.suite`); its figures (suite.png, effective_length.png): `extension.figure`."""

from __future__ import annotations

from posformer.experiments.extension.suite import common_means, effective_lengths
from posformer.experiments.longeval.grid import task_scores
from posformer.experiments.tables import markdown_table


def suite_rows(results: dict) -> dict[str, dict]:
    """The rows that hold a suite grid, in the report's order."""
    return {row: r for row, r in results["rows"].items() if r.get("suite")}


def _effective(results: dict) -> tuple[float | None, dict]:
    cfg = results["config"]
    return effective_lengths(results["rows"], cfg["train_len"], cfg["suite_threshold"])


def effective_table(results: dict) -> str:
    """Rows: the mean suite exact match at each length where every task fits, and the effective length."""
    rows = suite_rows(results)
    _, found = _effective(results)
    lengths = sorted({n for r in rows.values() for n in common_means(r["suite"])})
    body = []
    for row, r in rows.items():
        means = common_means(r["suite"])
        length = found.get(row)
        body.append([row] + [f"{means[n]:.2f}" if n in means else "n/a" for n in lengths] + [str(length or "< all")])
    return markdown_table(["row"] + [str(n) for n in lengths] + ["effective length"], body)


def task_table(results: dict, row: str) -> str:
    """Tasks x lengths of one row: exact match averaged over depths (n/a: the prompt does not fit)."""
    scores = task_scores(results["rows"][row]["suite"])
    lengths = results["config"]["passkey_lengths"]
    body = [[task] + [f"{by_n[n]:.2f}" if n in by_n else "n/a" for n in lengths] for task, by_n in scores.items()]
    return markdown_table(["task \\ length"] + [str(n) for n in lengths], body)


def markdown(results: dict) -> list[str]:
    """The report's suite section (empty when no row was scored on the suite)."""
    rows = suite_rows(results)
    if not rows:
        return []
    cfg = results["config"]
    score, _ = _effective(results)
    rule = (
        "the source was not scored at train_len"
        if score is None
        else f"the longest length up to which the mean exceeds {cfg['suite_threshold']:g} x the source's mean at "
        f"L={cfg['train_len']} = {score:.3f} at every length"
    )
    parts = [
        "## Long-context suite: mean exact match by length, effective length\n",
        f"{cfg['suite_trials']} prompts per task, length and depth (`posformer longeval`'s evaluation split). "
        f"Effective length: {rule}.\n",
        effective_table(results) + "\n",
    ]
    for row in rows:
        parts += [f"### suite, {row}: exact match by task and length\n", task_table(results, row) + "\n"]
    return parts
