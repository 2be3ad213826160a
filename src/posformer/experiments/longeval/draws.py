"""The random draws of the suite, all from one `torch.Generator`: a prompt is a function of the generator's seed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch

T = TypeVar("T")


def uniform(g: torch.Generator) -> float:
    """A float in [0, 1)."""
    return float(torch.rand((), generator=g))


def randint(g: torch.Generator, n: int) -> int:
    """An int in [0, n)."""
    return int(torch.randint(n, (), generator=g))


def shuffled(g: torch.Generator, items: Sequence[T]) -> list[T]:
    """`items` in a random order."""
    return [items[i] for i in torch.randperm(len(items), generator=g).tolist()]


def distinct(g: torch.Generator, pool: Sequence[T], count: int) -> list[T]:
    """`count` distinct items of `pool`, in the order drawn (with replacement, repeats drawn again)."""
    if count > len(pool):
        raise ValueError(f"cannot draw {count} distinct items from a pool of {len(pool)}")
    chosen: dict[int, None] = {}
    while len(chosen) < count:
        chosen.setdefault(randint(g, len(pool)), None)
    return [pool[i] for i in chosen]
