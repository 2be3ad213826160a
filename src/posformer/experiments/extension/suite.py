"""The long-context suite (`experiments.longeval`, after RULER) in `posformer extend`'s grid: every row scored on the
suite's tasks at the passkey lengths and depths, and each row's effective length.

A task is scored at the lengths its prompt fits (`SuiteTask.minimum_length`); the means and the effective length
use the lengths where every task fits. The effective length of every row follows one rule, so the rows compare:
the longest length up to which the row's mean exact match exceeds `suite_threshold` times the *source's* mean at
train_len (`longeval.effective`, relative form with the source as the reference).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from posformer.experiments.longeval.effective import effective_length
from posformer.experiments.longeval.grid import Grid, grid_tokens, length_means, suite_grid
from posformer.experiments.longeval.items import Encode
from posformer.experiments.longeval.tasks import get_task
from posformer.model import Transformer


def fitting_lengths(tasks: list[str], lengths: list[int], encode: Encode) -> dict[str, list[int]]:
    """{task: the lengths of `lengths` its prompts fit}."""
    return {task: [n for n in lengths if n >= get_task(task).minimum_length(encode)] for task in tasks}


def suite_tokens(cells: dict[str, list[int]], depths: list[float], trials: int) -> int:
    """The tokens `score_suite` reads (a progress bar's total)."""
    return sum(grid_tokens([task], lengths, depths, trials) for task, lengths in cells.items() if lengths)


def score_suite(
    model: Transformer,
    encode: Encode,
    cells: dict[str, list[int]],
    depths: list[float],
    trials: int,
    seed: int,
    haystack_ids: Tensor | None,
    batch_tokens: int,
    advance: Callable[[int], None] | None = None,
) -> Grid:
    """{task: {str(length): {depth key: {"exact", "tokens", "chance"}}}} at each task's fitting lengths."""
    grid: Grid = {}
    for task, lengths in cells.items():
        if lengths:
            grid |= suite_grid(
                model, encode, lengths, [task], depths, trials, seed, haystack_ids, batch_tokens, advance
            )
    return grid


def common_means(grid: Grid) -> dict[int, float]:
    """{length: mean exact match over the tasks} at the lengths where every task of `grid` was scored."""
    shared = set.intersection(*(set(by_length) for by_length in grid.values())) if grid else set()
    return length_means({task: {n: by_length[n] for n in shared} for task, by_length in grid.items()})


def effective_lengths(rows: dict[str, dict], train_len: int, fraction: float) -> tuple[float | None, dict]:
    """(the score to exceed, {row: effective length or None}) for the rows holding a "suite" grid; the threshold is
    `fraction` x the source row's mean at train_len (None, and no lengths, when the source was not scored there)."""
    source = rows.get("source", {}).get("suite")
    base = common_means(source).get(train_len) if source else None
    if base is None:
        return None, {}
    score = fraction * base
    return score, {row: effective_length(common_means(r["suite"]), score) for row, r in rows.items() if "suite" in r}
