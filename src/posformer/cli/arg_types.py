"""Argument types that refuse bad numbers while the command line is parsed: `--heads 0` or
`--temperature nan` is an argparse error (exit 2, the flag named) before any work starts. `option_flags` makes
one for every int or float option from its declared range.

    parser.add_argument("--iters", type=number_type(int, lambda v: v >= 1, "a positive integer"))
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
