"""One prompt of the suite, what every task provides, and how a prompt is put together to an exact length.

A prompt is `haystack with pieces inserted | question | answer`, exactly `length` tokens; the answer comes last, so
one teacher-forced pass scores it (`grid`). Text is encoded piece by piece at word boundaries (each piece starting
with its space) and the ids concatenated: token counts then add up, so a task can bound its length before drawing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from posformer.experiments.longeval.haystacks import Haystack
from posformer.experiments.longeval.items import Encode


@dataclass(frozen=True)
class SuitePrompt:
    """ids: (length,) the whole sequence, answer included; answer_start: the index of the answer's first token;
    answer: its text; candidates: how many answers a uniform guess picks from (the prompt's needle values, variables
    or listed words, in order when the answer lists several; every value of its kind for a single needle), so its
    chance of an exact match is 1 / candidates."""

    ids: Tensor
    answer_start: int
    answer: str
    candidates: int

    @property
    def chance(self) -> float:
        return 1.0 / self.candidates


class SuiteTask(Protocol):
    """A task family with its parameters. haystack: "noise", "book" (needs a token stream) or "none"; uses_depth:
    whether `prompt` places its needle at a given depth (otherwise depth must be None)."""

    name: str
    haystack: str
    uses_depth: bool
    summary: str

    def prompt(
        self,
        encode: Encode,
        length: int,
        depth: float | None,
        rng: torch.Generator,
        split: str = "eval",
        haystack_ids: Tensor | None = None,
    ) -> SuitePrompt: ...

    def minimum_length(self, encode: Encode) -> int: ...


def pieces(encode: Encode, *texts: str) -> list[int]:
    """The ids of `texts` encoded one at a time, concatenated."""
    return [i for text in texts for i in encode(text)]


def listing(encode: Encode, items: list[str], separator: str = "") -> list[int]:
    """ " a, b, c" (separator ",") or " a b c" (separator ""): each item its own piece."""
    ids: list[int] = []
    for n, item in enumerate(items):
        ids += (encode(separator) if n and separator else []) + encode(" " + item)
    return ids


def listing_text(items: list[str], separator: str = "") -> str:
    return "".join((separator if n else "") + " " + item for n, item in enumerate(items))


def too_short(task: str, length: int, need: int) -> ValueError:
    return ValueError(
        f"longeval: task {task!r} needs prompts of at least {need} tokens with this tokenizer; length {length} is "
        "too short"
    )


def room_for(task: str, length: int, *parts: int) -> int:
    """The haystack tokens left in `length` once `parts` are placed; a clear error when none would be left."""
    room = length - sum(parts)
    if room < 0:
        raise too_short(task, length, sum(parts))
    return room


def check_depth(task: str, depth: float | None, uses_depth: bool) -> None:
    if depth is None:
        return
    if not uses_depth:
        raise ValueError(f"longeval: task {task!r} places its items at random depths; give depth=None, not {depth}")
    if not 0 <= depth <= 1:
        raise ValueError(f"longeval: depth={depth} is out of range: expected a number in [0, 1]")


def insert(haystack: Haystack, inserts: list[tuple[float, list[int]]]) -> tuple[list[int], list[int]]:
    """The haystack with each (depth, ids) inserted at the boundary nearest to depth * len(haystack.ids), ties in
    the order given -> (ids, the order in which the inserts appear)."""
    cuts = [haystack.nearest(depth * len(haystack.ids)) for depth, _ in inserts]
    order = sorted(range(len(inserts)), key=lambda i: (cuts[i], i))
    ids, done = [], 0
    for i in order:
        ids += haystack.ids[done : cuts[i]] + inserts[i][1]
        done = cuts[i]
    return ids + haystack.ids[done:], order


def finish(
    body: list[int], question: list[int], answer: list[int], answer_text: str, candidates: int, length: int
) -> SuitePrompt:
    ids = body + question + answer
    if len(ids) != length:
        raise AssertionError(f"a prompt of {len(ids)} tokens where {length} were asked")
    return SuitePrompt(torch.tensor(ids, dtype=torch.long), length - len(answer), answer_text, candidates)
