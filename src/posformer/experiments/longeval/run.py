"""`posformer longeval`: the suite on one checkpoint, written to OUTPUT/results.json and results.md.

The model and its tokenizer are loaded (`loading`), the request is checked before any scoring (a task, length or
depth out of range, a length the model's positions cannot represent: a clear error naming it), the held-out books
are read when a task needs book text, and the grid is scored with a progress bar counting tokens. The results are
written atomically after each task, so an interrupted run leaves the tasks it finished.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import torch

from posformer import positions
from posformer.experiments.longeval import report
from posformer.experiments.longeval.effective import effective_length, rule_text, threshold_for
from posformer.experiments.longeval.grid import Grid, check_request, grid_tokens, length_means, suite_grid, task_scores
from posformer.experiments.longeval.haystacks import book_ids
from posformer.experiments.longeval.items import Encode
from posformer.experiments.longeval.settings import LongevalSettings
from posformer.experiments.longeval.tasks import get_task, parse_length
from posformer.model import Transformer
from posformer.utils.options import check_options
from posformer.utils.progress import progress_bar
from posformer.utils.safe_write import write_json_atomic, write_text_atomic

BOOK_CHARS_PER_TOKEN = 8  # characters of each held-out book read per token of the longest length (2 windows' worth)
BOOK_MIN_CHARS = 200_000


def longest_position(model: Transformer) -> int | None:
    """The longest input the model's position encoding represents (a learned table's size), None when unbounded."""
    cfg = model.cfg
    encoding = positions.get(cfg.position)
    found = encoding.max_length(cfg.position_params, cfg.max_positions)
    return found or (None if encoding.extrapolates else cfg.max_positions)


def check_model(model: Transformer, path: str, lengths: list[int]) -> None:
    """A causal LM whose positions reach the longest length; a clear error otherwise."""
    if model.cfg.arch != "decoder":
        raise ValueError(f"longeval: {path} is an {model.cfg.arch!r} model: the suite scores a causal LM (decoder)")
    longest = longest_position(model)
    if longest is not None and max(lengths) > longest:
        raise ValueError(
            f"longeval: {path} uses {model.cfg.position!r} positions, which stop at {longest} tokens "
            f"(Config.max_positions): it cannot represent length {max(lengths)}; give lengths up to {longest}"
        )


def load_encode(path: str) -> Encode:
    """text -> ids without special tokens, by the tokenizer stored beside the model."""
    from posformer.experiments import corpus
    from posformer.loading import load_text_tokenizer

    loaded = load_text_tokenizer(path)
    tokenizer = getattr(loaded, "tokenizer", loaded)  # the Hugging Face tokenizer itself, or posformer's own
    return lambda text: corpus.encode(tokenizer, text).tolist()


def summarise(results: dict, grid: Grid, threshold: float, reference: int | None) -> None:
    """The per-task and per-length means, chance levels and effective length of `grid`, into `results`."""
    scores, chance = task_scores(grid), task_scores(grid, "chance")
    results["scores"] = {t: {str(n): v for n, v in s.items()} for t, s in scores.items()}
    results["chance"] = {t: {str(n): v for n, v in s.items()} for t, s in chance.items()}
    means = length_means(grid) if grid else {}
    results["means"] = {str(n): v for n, v in means.items()}
    results["chance_means"] = {str(n): v for n, v in (length_means(grid, "chance") if grid else {}).items()}
    if len(grid) == len(results["config"]["tasks"]):
        score = threshold_for(means, threshold, reference)
        results["effective_length"] = {
            "length": effective_length(means, score),
            "threshold": score,
            "rule": rule_text(threshold, reference, score),
            "reference_length": reference,
            "lengths": sorted(means),
        }


def run_longeval(settings: LongevalSettings, log: Callable[[str], None] = print) -> dict:
    """Run the suite as `settings` asks; the results dict (also in OUTPUT/results.json)."""
    from posformer.experiments.runner import versions
    from posformer.loading import load_model
    from posformer.train.distributed import resolve_device
    from posformer.train.run_lock import check_output_dir

    s, started = settings, time.monotonic()
    check_options(s, prefix="longeval: ")
    lengths = sorted({parse_length(n) for n in s.lengths})
    reference = None if s.reference_length is None else parse_length(s.reference_length)
    if reference is not None and reference not in lengths:
        raise ValueError(f"longeval: --reference-length {reference} is not among --lengths {lengths}")
    for task in s.tasks:
        get_task(task)
    encode = load_encode(s.model)
    check_request(s.tasks, lengths, s.depths, s.trials, encode)
    out = Path(s.output_dir)
    check_output_dir(out)
    model = load_model(s.model, dtype=getattr(torch, s.dtype), device=str(resolve_device(s.device)))
    check_model(model, s.model, lengths)
    haystack = None
    if any(get_task(t).haystack == "book" for t in s.tasks):
        chars = max(BOOK_MIN_CHARS, BOOK_CHARS_PER_TOKEN * max(lengths))
        haystack = book_ids(encode, "eval", s.data_dir, chars)
    results: dict = {
        "benchmark": "longeval",
        "model": {
            "path": str(Path(s.model).resolve()),
            "parameters": model.num_parameters(),
            "position": model.cfg.position,
        },
        "config": {**s.to_dict(), "lengths": lengths, "reference_length": reference},
        "haystack_tokens": None if haystack is None else haystack.numel(),
        "grid": {},
        "versions": versions(),
    }

    def save(task: str | None = None, cells: dict | None = None) -> None:
        if task is not None:
            results["grid"][task] = cells
        summarise(results, results["grid"], s.threshold, reference)
        results["wall_s"] = round(time.monotonic() - started, 2)
        write_json_atomic(out / "results.json", results)
        write_text_atomic(out / "results.md", report.markdown(results))

    total = grid_tokens(s.tasks, lengths, s.depths, s.trials)
    with progress_bar(total=total, desc="longeval", unit="tok", unit_scale=True, disable=not s.progress) as bar:
        suite_grid(
            model, encode, lengths, s.tasks, s.depths, s.trials, s.seed, haystack, s.batch_tokens, bar.update, save
        )
    save()
    log(f"longeval: {len(s.tasks)} tasks at {len(lengths)} lengths in {results['wall_s']:.0f} s")
    return results
