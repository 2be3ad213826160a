"""The checks every settings object shares: Config, run settings, QA options, experiment settings.

Each raises a `ValueError` that names the field (with its owner's prefix), the
value and what was expected, e.g. `trainer.lr=-1 is invalid: expected a number > 0`.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn


def fail(name: str, value: Any, expected: str) -> NoReturn:
    """Raise the one error shape: `{name}={value!r} is invalid: expected {expected}`."""
    raise ValueError(f"{name}={value!r} is invalid: expected {expected}")


def is_number(value: Any) -> bool:
    """A finite int or float, and not a bool (True is an int to Python, never a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_int(value: Any) -> bool:
    """An int, and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, minimum: int = 1) -> None:
    """`value` is an integer >= `minimum` (1: "a positive integer")."""
    if not is_int(value) or value < minimum:
        fail(name, value, "a positive integer" if minimum == 1 else f"an integer >= {minimum}")


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> None:
    """`value` is a number in the interval given by `low` / `high` (closed unless `*_open`)."""
    ok = is_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        fail(name, value, _interval(low, high, low_open, high_open))


def check_choice(name: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    """`value` is one of `allowed`."""
    if value not in allowed:
        fail(name, value, f"one of {', '.join(map(str, allowed))}")


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"a number {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"a number {'<' if high_open else '<='} {high:g}"
    return "a finite number"
