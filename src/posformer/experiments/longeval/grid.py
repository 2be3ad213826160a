"""The suite on a model: exact match per task, length and depth, from one teacher-forced pass per prompt.

    grid = suite_grid(model, encode, [1024, 2048], ["single_noise", "vt"], [0.0, 0.5, 1.0], trials=20)
    grid["vt"]["1024"]["any"]            # {"exact": 0.35, "tokens": 0.81, "chance": 0.0083}
    grid["single_noise"]["2048"]["0.5"]  # the needle at half depth

A trial is an exact match when the model's argmax agrees with every answer token given the prompt and the
answer's own prefix: what greedy decoding would write (`passkey.retrieval`). Tasks that place their items at
random depths have one cell per length, "any". Trial t of a task draws the same items at every length and depth
(its generator is seeded by seed, task and t), so the cells of a task differ only in length and depth.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch
from torch import Tensor

from posformer.experiments.longeval.items import Encode
from posformer.experiments.longeval.prompt import SuitePrompt
from posformer.experiments.longeval.tasks import check_depths, check_lengths, get_task
from posformer.experiments.passkey import retrieval
from posformer.model import Transformer

ANY_DEPTH = "any"
Grid = dict[str, dict[str, dict[str, dict[str, float]]]]


def trial_generator(seed: int, task: str, trial: int) -> torch.Generator:
    """The generator of trial `trial` of `task`: the same at every length and depth."""
    digest = hashlib.sha256(f"{seed}/{task}/{trial}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def depth_keys(task: str, depths: list[float]) -> list[tuple[str, float | None]]:
    """The cells of a task at one length: (key, depth) for each depth, or one ("any", None)."""
    return [(str(float(d)), float(d)) for d in depths] if get_task(task).uses_depth else [(ANY_DEPTH, None)]


def cell_prompts(
    task: str, encode: Encode, length: int, depth: float | None, trials: int, seed: int, haystack_ids: Tensor | None
) -> list[SuitePrompt]:
    """The `trials` evaluation prompts of one cell."""
    made = get_task(task)
    return [
        made.prompt(encode, length, depth, trial_generator(seed, task, t), "eval", haystack_ids) for t in range(trials)
    ]


def score_prompts(
    model: Transformer, prompts: list[SuitePrompt], batch_size: int, advance: Callable[[int], None] | None = None
) -> dict[str, float]:
    """{"exact": exact-match rate, "tokens": fraction of answer tokens right, "chance": mean chance} of prompts of
    one length; prompts whose answers differ in token count are scored apart (a batch has one shape)."""
    groups: dict[int, list[SuitePrompt]] = {}
    for p in prompts:
        groups.setdefault(p.answer_start, []).append(p)
    exact = tokens = 0.0
    for group in groups.values():
        hits, right = retrieval(model, group, batch_size, advance)
        exact, tokens = exact + hits.sum().item(), tokens + right.sum().item()
    n = len(prompts)
    return {"exact": exact / n, "tokens": tokens / n, "chance": sum(p.chance for p in prompts) / n}


def check_request(tasks: list[str], lengths: list[int], depths: list[float], trials: int, encode: Encode) -> None:
    """Every task known, every depth in [0, 1], every length long enough for every task, trials >= 1; a clear
    error naming the first that is not."""
    if not tasks or not lengths:
        raise ValueError(f"longeval: no {'tasks' if not tasks else 'lengths'} given")
    check_depths(depths)
    if not depths and any(get_task(name).uses_depth for name in tasks):
        raise ValueError("longeval: no depths given")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"longeval: trials={trials!r} is out of range: expected a positive integer")
    check_lengths(tasks, lengths, encode)


def check_haystack(tasks: list[str], lengths: list[int], haystack_ids: Tensor | None) -> None:
    """Book text for the tasks that need it, at least as long as the longest length."""
    books = [name for name in tasks if get_task(name).haystack == "book"]
    if books and (haystack_ids is None or haystack_ids.numel() < max(lengths)):
        held = 0 if haystack_ids is None else haystack_ids.numel()
        raise ValueError(
            f"longeval: task {books[0]!r} hides its needles in book text: give at least {max(lengths)} tokens of "
            f"it (haystack_ids holds {held})"
        )


@torch.no_grad()
def suite_grid(
    model: Transformer,
    encode: Encode,
    lengths: list[int],
    tasks: list[str],
    depths: list[float],
    trials: int,
    seed: int = 0,
    haystack_ids: Tensor | None = None,
    batch_tokens: int = 8192,
    advance: Callable[[int], None] | None = None,
    on_task: Callable[[str, dict], None] | None = None,
) -> Grid:
    """{task: {str(length): {depth key: {"exact", "tokens", "chance"}}}} (see the module docstring).

    encode: str -> list[int] (no special tokens); haystack_ids: (N,) held-out book tokens for the book tasks. A
    batch holds batch_tokens // length prompts, one at least; `advance` is told the tokens of each batch scored
    (`grid_tokens` in all); `on_task(task, its grid)` is called as each task finishes. Everything asked for is
    checked before any scoring (`check_request`, `check_haystack`)."""
    check_request(tasks, lengths, depths, trials, encode)
    check_haystack(tasks, lengths, haystack_ids)
    grid: Grid = {}
    for task in tasks:
        grid[task] = {}
        for length in lengths:
            grid[task][str(length)] = {
                key: score_prompts(
                    model,
                    cell_prompts(task, encode, length, depth, trials, seed, haystack_ids),
                    max(1, batch_tokens // length),
                    advance,
                )
                for key, depth in depth_keys(task, depths)
            }
        if on_task is not None:
            on_task(task, grid[task])
    return grid


def grid_tokens(tasks: list[str], lengths: list[int], depths: list[float], trials: int) -> int:
    """The tokens `suite_grid` reads (what a progress bar counts)."""
    return sum(len(depth_keys(task, depths)) * trials * sum(lengths) for task in tasks)


def task_scores(grid: Grid, key: str = "exact") -> dict[str, dict[int, float]]:
    """{task: {length: `key` averaged over the task's depths}}: "exact", "tokens" or "chance"."""
    return {
        task: {int(n): sum(c[key] for c in cells.values()) / len(cells) for n, cells in by_length.items()}
        for task, by_length in grid.items()
    }


def length_means(grid: Grid, key: str = "exact") -> dict[int, float]:
    """{length: `key` averaged over the tasks (each task's depths averaged first, so every task weighs the same)}."""
    scores = task_scores(grid, key)
    lengths = sorted({n for by_length in scores.values() for n in by_length})
    return {n: sum(s[n] for s in scores.values()) / len(scores) for n in lengths}
