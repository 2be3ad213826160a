"""results.md of `posformer longeval`: exact match by task and length with each task's chance, the mean by length,
the effective length with its rule, and a depth x length table for each task with a depth."""

from __future__ import annotations

from posformer.experiments.longeval.grid import ANY_DEPTH
from posformer.experiments.tables import markdown_table


def _score(value: float, chance: float) -> str:
    """A score, marked when it is not above chance."""
    return f"{value:.2f}" + (" (at chance)" if value <= chance else "")


def _effective(found: dict) -> str:
    lengths = found["lengths"]
    if found["length"] is None:
        return f"< {lengths[0]} (the shortest length is below the threshold)"
    if found["length"] == lengths[-1]:
        return f">= {found['length']} (every length evaluated is above the threshold)"
    return str(found["length"])


def task_table(results: dict) -> str:
    """Tasks x lengths: exact match averaged over depths ("(at chance)": not above the task's chance there), the
    chance, and the mean row."""
    lengths = [str(n) for n in results["config"]["lengths"]]
    body = []
    for task, by_length in results["scores"].items():
        chance = results["chance"][task]
        low, high = min(chance.values()), max(chance.values())
        shown = f"{high:.3g}" if low == high else f"{low:.3g} - {high:.3g}"
        body.append([task] + [_score(by_length[n], chance[n]) for n in lengths if n in by_length] + [shown])
    means, chance_means = results["means"], results["chance_means"]
    if means:
        body.append(["**mean**"] + [_score(means[n], chance_means[n]) for n in lengths if n in means] + [""])
    return markdown_table(["task \\ length"] + lengths + ["chance"], body)


def depth_table(results: dict, task: str) -> str:
    """Depths x lengths of one task: exact match / fraction of answer tokens right."""
    grid = results["grid"][task]
    lengths = [n for n in map(str, results["config"]["lengths"]) if n in grid]
    depths = list(grid[lengths[0]]) if lengths else []
    body = [
        [depth] + [f"{grid[n][depth]['exact']:.2f} / {grid[n][depth]['tokens']:.2f}" for n in lengths]
        for depth in depths
    ]
    return markdown_table(["depth \\ length"] + lengths, body)


def markdown(results: dict) -> str:
    cfg, model = results["config"], results["model"]
    parts = [
        "# Long-context suite (after RULER)\n",
        f"Model: {model['path']} ({model['parameters']:,} parameters, position {model['position']!r}). "
        f"{cfg['trials']} prompts per task, length and depth, seed {cfg['seed']}; exact match of greedy decoding "
        "(teacher-forced). Chance: a uniform guess among the prompt's candidates (needle values, variables, listed "
        "words), in order; for a single needle, among every value of its kind.\n",
        task_table(results) + "\n",
    ]
    found = results.get("effective_length")
    if found is not None:
        parts.append(f"Effective length: **{_effective(found)}**: {found['rule']}.\n")
    for task, by_length in results["grid"].items():
        first = next(iter(by_length.values()), {})
        if first and ANY_DEPTH not in first:
            parts += [f"## {task}: exact match / answer tokens right, by depth\n", depth_table(results, task) + "\n"]
    return "\n".join(parts)
