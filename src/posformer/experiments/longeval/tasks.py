"""The suite's tasks by name (`TASKS`, under the names `task_names.TASK_NAMES` declares, with a line each), the
checks of what a caller asks for, and the prompts the training side mixes in."""

from __future__ import annotations

import re

import torch
from torch import Tensor

from posformer.experiments.longeval.items import Encode
from posformer.experiments.longeval.needles import NeedleTask
from posformer.experiments.longeval.prompt import SuitePrompt, SuiteTask
from posformer.experiments.longeval.variables import VariableTracking
from posformer.experiments.longeval.word_lists import CommonWords, FrequentWords

TASKS: dict[str, SuiteTask] = {
    task.name: task
    for task in (
        NeedleTask("single_noise", "number", "noise", "one needle in noise, a number (the passkey's setting)"),
        NeedleTask("single_number", "number", "book", "one needle in book text, a number"),
        NeedleTask("single_word", "word", "book", "one needle in book text, a word"),
        NeedleTask("single_uuid", "uuid", "book", "one needle in book text, an 8-hex-digit code"),
        NeedleTask("multikey", "number", "book", "4 needles with distinct keys, one asked", keys=4),
        NeedleTask("multivalue", "number", "book", "3 needles of one key, every value asked in order", values=3),
        NeedleTask("multiquery", "number", "book", "4 needles, 2 keys asked at once", keys=4, queries=2),
        VariableTracking(),
        CommonWords(),
        FrequentWords(),
    )
}
LENGTH = re.compile(r"^\s*(\d+)\s*([kK]?)\s*$")
KILO = 1024


def get_task(name: str) -> SuiteTask:
    """The task called `name`; a clear error naming it and the tasks there are."""
    if name not in TASKS:
        raise ValueError(f"longeval: unknown task {name!r}: expected one of {', '.join(TASKS)}")
    return TASKS[name]


def parse_length(text: str | int) -> int:
    """A length as an int: "4096", "4k" or "4K" (k = 1024); a clear error naming a bad one."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        found = LENGTH.match(str(text))
        if found is None:
            raise ValueError(
                f"longeval: length {text!r} is not a length: expected an integer or Nk (k = 1024), e.g. 4k"
            )
        value = int(found.group(1)) * (KILO if found.group(2) else 1)
    if value < 1:
        raise ValueError(f"longeval: length {text!r} is out of range: expected a positive number of tokens")
    return value


def check_depths(depths: list[float]) -> None:
    """Every depth is in [0, 1]; a clear error naming the first that is not."""
    for depth in depths:
        if isinstance(depth, bool) or not isinstance(depth, (int, float)) or not 0 <= depth <= 1:
            raise ValueError(f"longeval: depth {depth!r} is out of range: expected a number in [0, 1]")


def check_lengths(tasks: list[str], lengths: list[int], encode: Encode) -> None:
    """Every task's prompt fits every length; a clear error naming the first task and length that do not."""
    for name in tasks:
        need = get_task(name).minimum_length(encode)
        short = [n for n in lengths if n < need]
        if short:
            raise ValueError(
                f"longeval: task {name!r} needs prompts of at least {need} tokens with this tokenizer; length "
                f"{short[0]} is too short (drop it, or the task)"
            )


def training_prompt(
    task: str, encode: Encode, length: int, rng: torch.Generator, haystack_ids: Tensor | None = None
) -> SuitePrompt:
    """A training-split prompt of `task`, exactly `length` tokens, its needle (if any) at a uniform depth;
    haystack_ids (N,): book tokens of the training split, for tasks that hide their needles in books."""
    return get_task(task).prompt(encode, length, None, rng, "train", haystack_ids)
