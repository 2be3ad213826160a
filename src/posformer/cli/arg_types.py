"""Argument types that refuse bad numbers while the command line is parsed: `--heads 0` or
`--temperature nan` is an argparse error (exit 2, the flag named) before any work starts.

    parser.add_argument("--iters", type=positive_int, default=3)
"""

from __future__ import annotations

import argparse
import math
from typing import Callable


def number_type(kind: type, ok: Callable[[float], bool], expected: str) -> Callable[[str], int | float]:
    """An argparse `type`: text read as `kind` (int or a finite float) for which `ok(value)` holds, else an
    `ArgumentTypeError` saying the value is not `expected`."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text} is not {expected}")
        return value

    parse.__name__ = expected  # argparse names a failed type by it
    return parse


positive_int = number_type(int, lambda v: v >= 1, "a positive integer")
non_negative_int = number_type(int, lambda v: v >= 0, "an integer >= 0")
positive_float = number_type(float, lambda v: v > 0, "a number > 0")
non_negative_float = number_type(float, lambda v: v >= 0, "a number >= 0")
fraction = number_type(float, lambda v: 0 <= v <= 1, "a number in [0, 1]")
open_fraction = number_type(float, lambda v: 0 < v <= 1, "a number in (0, 1]")  # a mass that keeps something
