"""The tables of task runs over several seeds (`posformer extrapolate --task T --seeds N`): exact match as the
mean over seeds with its 95% Student-t interval (clipped to [0, 1]), the mean reciprocal rank of each seed and
their spread, and every ranking claim seed by seed (`seeds.stats`): a pair is ordered only when the interval of
its per-seed difference excludes 0."""

from __future__ import annotations

from itertools import combinations

from posformer.experiments.seeds.runs import seed_runs
from posformer.experiments.seeds.stats import compare, spread
from posformer.experiments.synthetic.report import PAPER_MRR, mean_reciprocal_rank, paper_cell
from posformer.experiments.tables import markdown_table

UNIT = (0.0, 1.0)


def _rows(runs: list[dict]) -> list[str]:
    """The rows every seed recorded without error, in the first seed's order."""
    return [
        row for row in runs[0]["rows"] if all(run["rows"].get(row, {}).get("error", "missing") is None for run in runs)
    ]


def accuracy_table(record: dict) -> str:
    """Exact match per encoding and length: mean over seeds [95% interval]."""
    runs, lengths = seed_runs(record), record["config"]["eval_lens"]
    body = [
        [row] + [spread([run["rows"][row]["accuracy"][str(n)] for run in runs]).cell(3, UNIT) for n in lengths]
        for row in _rows(runs)
    ]
    return markdown_table(["encoding"] + [f"n={n}" for n in lengths], body)


def seed_ranks(runs: list[dict]) -> dict[str, list[float]]:
    """{row: its mean reciprocal rank in each seed} over the rows every seed has."""
    rows, per_seed = _rows(runs), [mean_reciprocal_rank(run) for run in runs]
    return {row: [ranks[row] for ranks in per_seed] for row in rows}


def ordering_table(ranks: dict[str, list[float]]) -> str:
    """The pairs of encodings the paper orders (or, without the paper, every pair), each with the per-seed
    difference of mean reciprocal rank and its verdict."""
    pairs = [(a, b) for a, b in combinations(sorted(ranks, key=lambda r: -PAPER_MRR.get(r, -1)), 2)]
    body = []
    for a, b in pairs:
        found = compare(ranks[a], ranks[b])
        body.append([f"{a} - {b}", found.difference.cell(2, (-1.0, 1.0), sign=True), found.verdict(a, b)])
    header = ["pair a - b (the paper's rows in its order)", "MRR difference [95% interval]", "verdict"]
    return markdown_table(header, body, align="lrl")


def separated_line(ranks: dict[str, list[float]]) -> str:
    """The pairs whose per-seed difference of mean reciprocal rank has an interval that excludes 0, in a line."""
    found = []
    for a, b in combinations(ranks, 2):
        pair = compare(ranks[a], ranks[b])
        if pair.separated:
            better, worse = (a, b) if pair.difference.mean > 0 else (b, a)
            found.append(f"{better} > {worse} ({max(pair.a_higher, pair.b_higher)} of {len(ranks[a])} seeds)")
    if not found:
        return "Separated by mean reciprocal rank: no pair."
    return "Separated by mean reciprocal rank: " + "; ".join(found) + "; no other pair."


def _mrr_table(ranks: dict[str, list[float]], seeds: list[str]) -> str:
    body = [
        [row, *(f"{v:.2f}" for v in ranks[row]), spread(ranks[row]).cell(2, UNIT), paper_cell(row)]
        for row in sorted(ranks, key=lambda r: -sum(ranks[r]))
    ]
    return markdown_table(["encoding", *(f"seed {s}" for s in seeds), "mean [95% interval]", "paper"], body)


def markdown(record: dict) -> str:
    """results.md of a task run over seeds."""
    cfg, seeds = record["config"], list(record["per_seed"])
    ranks = seed_ranks(seed_runs(record))
    lines = [
        f"# Task `{cfg['task']}` over {len(seeds)} seeds ({', '.join(seeds)}): exact-match accuracy by length\n",
        f"Trained at lengths 1..{cfg['train_len']} ({cfg['steps']} steps of {cfg['batch_size']} examples; "
        f"d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} heads); {cfg['eval_examples']} held-out "
        "examples per length and seed. Each cell: the mean over seeds [95% Student-t interval, clipped to [0, 1]]; a "
        "bare value: every seed gave it.\n",
        accuracy_table(record),
        "",
        f"Mean reciprocal rank beyond n={cfg['train_len']}, per seed (Kazemnejad et al. 2023 beside):\n",
        _mrr_table(ranks, seeds),
        "",
        "Each pair of encodings, seed by seed (a pair is ordered only when its interval excludes 0):\n",
        ordering_table(ranks),
    ]
    return "\n".join(lines) + "\n"


def summary_markdown(records: dict[str, dict]) -> str:
    """Several task runs over the same seeds ({name: record}): each task's accuracy table, then the mean
    reciprocal rank per task (mean over seeds) and over the tasks (per seed, then its spread), and the paper's
    orderings seed by seed."""
    seeds = list(next(iter(records.values()))["per_seed"])
    for name, record in records.items():
        if list(record["per_seed"]) != seeds:
            raise ValueError(f"{name}: seeds {list(record['per_seed'])}; the other runs have {seeds}")
    by_task = {name: seed_ranks(seed_runs(record)) for name, record in records.items()}
    shared = [row for row in next(iter(by_task.values())) if all(row in ranks for ranks in by_task.values())]
    over_tasks = {
        row: [sum(ranks[row][i] for ranks in by_task.values()) / len(by_task) for i in range(len(seeds))]
        for row in shared
    }
    lines = [
        f"# Length generalisation over {len(records)} tasks and {len(seeds)} seeds ({', '.join(seeds)})\n",
        "Exact match: the mean over seeds [95% Student-t interval over seeds, clipped to [0, 1]]; a bare value: "
        "every seed gave it.\n",
    ]
    for name, record in records.items():
        cfg = record["config"]
        lines += [
            f"## `{name}`: trained at 1..{cfg['train_len']} ({cfg['steps']} steps, d_model {cfg['d_model']}, "
            f"{cfg['layers']} layers; {cfg['eval_examples']} examples a length and seed)\n",
            accuracy_table(record) + "\n",
            separated_line(by_task[name]) + "\n",
        ]
    lines += [
        "## Mean reciprocal rank beyond L: per task (mean over seeds), over the tasks (per seed, then the mean "
        "[95% interval])\n",
        markdown_table(
            ["encoding", *by_task, *(f"seed {s}" for s in seeds), "mean", "paper"],
            [
                [
                    row,
                    *(f"{sum(ranks[row]) / len(seeds):.2f}" for ranks in by_task.values()),
                    *(f"{v:.2f}" for v in over_tasks[row]),
                    spread(over_tasks[row]).cell(2, UNIT),
                    paper_cell(row),
                ]
                for row in sorted(shared, key=lambda r: -sum(over_tasks[r]))
            ],
        ),
    ]
    lines += ["", "Every pair over the tasks, seed by seed:\n", ordering_table(over_tasks)]
    return "\n".join(lines) + "\n"
