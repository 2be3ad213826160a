"""The tables of a task run, and how its ranking compares with Kazemnejad et al. (2023); its figures:
`synthetic.figure`.

The paper ranks five encodings by their accuracy beyond the training lengths and reports each one's mean
reciprocal rank over its tasks: NoPE 0.69, T5 0.55, ALiBi 0.50, Rotary 0.33, APE 0.22. Here the ranks are
taken at each evaluation length beyond train_len (ties share the best rank) and averaged the same way.
"""

from __future__ import annotations

from posformer.experiments.tables import markdown_table

PAPER_MRR = {"none": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}


def paper_cell(row: str) -> str:
    """Kazemnejad et al.'s mean reciprocal rank of `row` to two decimals, or "" where the paper has no such row."""
    paper = PAPER_MRR.get(row)
    return "" if paper is None else f"{paper:.2f}"


def beyond(results: dict) -> list[int]:
    cfg = results["config"]
    return [n for n in cfg["eval_lens"] if n > cfg["train_len"]]


def mean_reciprocal_rank(results: dict) -> dict[str, float]:
    """{row: the mean over the lengths beyond train_len of 1 / its rank by accuracy (1 = best, ties share)}."""
    rows = {row: r for row, r in results["rows"].items() if r.get("error") is None}  # a stopped row has no score
    lengths = beyond(results)
    if not rows or not lengths:
        return {}
    total = {row: 0.0 for row in rows}
    for n in lengths:
        scores = {row: r["accuracy"][str(n)] for row, r in rows.items()}
        for row, score in scores.items():
            rank = 1 + sum(other > score for other in scores.values())
            total[row] += 1.0 / rank
    return {row: value / len(lengths) for row, value in total.items()}


def accuracy_table(results: dict) -> str:
    """Exact match per encoding (rows) and evaluation length (columns)."""
    lengths = results["config"]["eval_lens"]
    body = [
        [row] + ["stopped" if r["accuracy"][str(n)] is None else f"{r['accuracy'][str(n)]:.3f}" for n in lengths]
        for row, r in results["rows"].items()
    ]
    return markdown_table(["encoding"] + [f"n={n}" for n in lengths], body)


def markdown(results: dict) -> str:
    cfg = results["config"]
    lines = [
        f"# Task `{cfg['task']}`: exact-match accuracy by length\n",
        f"Trained at lengths 1..{cfg['train_len']} ({cfg['steps']} steps of {cfg['batch_size']} examples; "
        f"d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} heads); {cfg['eval_examples']} "
        "held-out examples per length, greedy decoding (exact match of the whole target).\n",
        accuracy_table(results),
    ]
    mrr = mean_reciprocal_rank(results)
    if mrr:
        lines += [
            "",
            f"Mean reciprocal rank beyond n={cfg['train_len']} (ours) and in Kazemnejad et al. 2023:",
            "",
            markdown_table(
                ["encoding", "MRR (ours)", "MRR (paper)"],
                [[row, f"{mrr[row]:.2f}", paper_cell(row)] for row in sorted(mrr, key=lambda r: -mrr[r])],
                align="lll",
            ),
        ]
    return "\n".join(lines) + "\n"


def summary_markdown(runs: dict[str, dict]) -> str:
    """Several task runs ({name: results}) in one page: each task's accuracy table, then the mean reciprocal rank
    of every encoding per task and its mean over the tasks, beside the paper's (the encodings every run has)."""
    ranks = {name: mean_reciprocal_rank(results) for name, results in runs.items()}
    shared = [row for row in next(iter(runs.values()))["rows"] if all(row in r for r in ranks.values())]
    lines = ["# Length generalisation over several tasks\n"]
    for name, results in runs.items():
        cfg = results["config"]
        title = f"`{name}`" if name == cfg["task"] else f"{name} (`{cfg['task']}`)"
        lines += [
            f"## {title}: trained at 1..{cfg['train_len']} ({cfg['steps']} steps, "
            f"d_model {cfg['d_model']}, {cfg['layers']} layers; {cfg['eval_examples']} examples a length)\n",
            accuracy_table(results) + "\n",
        ]
    mean = {row: sum(r[row] for r in ranks.values()) / len(ranks) for row in shared}
    lines += [
        "## Mean reciprocal rank beyond L, per task and over the tasks\n",
        markdown_table(
            ["encoding", *ranks, "mean (ours)", "paper"],
            [
                [row, *(f"{r[row]:.2f}" for r in ranks.values()), f"{mean[row]:.2f}", paper_cell(row)]
                for row in sorted(shared, key=lambda r: -mean[r])
            ],
        ),
    ]
    return "\n".join(lines) + "\n"
