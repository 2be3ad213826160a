"""The checks every settings object shares: Config, run settings, QA options, experiment settings.

Each raises a `ValueError` that names the field (with its owner's prefix), the
value and what was expected, e.g. `trainer.lr=-1 is invalid: expected a number > 0`. The value is quoted by
`excerpt`: its repr, cut to `EXCERPT_CHARS` characters (and never built in full), so a huge value makes a short
message.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

EXCERPT_CHARS = 200  # the most of a value's repr that a message quotes


def fail(name: str, value: Any, expected: str) -> NoReturn:
    """Raise the one error shape: `{name}={excerpt(value)} is invalid: expected {expected}`."""
    raise ValueError(f"{name}={excerpt(value)} is invalid: expected {expected}")


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """`repr(value)`, or its first `limit` characters and "..." when longer. Lists, tuples and dicts are written
    piece by piece and only until the cut, so a value with billions of (shared) items costs no more than a short
    one."""
    text = ""
    for piece in _repr_pieces(value, limit):
        text += piece
        if len(text) > limit:
            return text[:limit] + "..."
    return text


def _repr_pieces(value: Any, limit: int) -> Iterator[str]:
    """The repr of `value` in pieces; a long string is written from its first `limit` + 1 characters only."""
    kind = type(value)
    if kind in (list, tuple):
        yield "[" if kind is list else "("
        for i, item in enumerate(value):
            yield ", " if i else ""
            yield from _repr_pieces(item, limit)
        yield "," if kind is tuple and len(value) == 1 else ""
        yield "]" if kind is list else ")"
    elif kind is dict:
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _repr_pieces(key, limit)
            yield ": "
            yield from _repr_pieces(item, limit)
        yield "}"
    elif kind is str and len(value) > limit:
        yield repr(value[: limit + 1] + _quote_forcing(value))
    else:
        yield repr(value)


def _quote_forcing(text: str) -> str:
    """Characters that, appended to a piece of `text`, make `repr` pick the quotes that it picks for all of `text`
    (double quotes only for a text with ' and without ")."""
    return "'" if "'" in text and '"' not in text else "'\""


def is_number(value: Any) -> bool:
    """A finite int or float, and not a bool (True is an int to Python, never a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_int(value: Any) -> bool:
    """An int, and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


LARGEST_INT = 2**31 - 1  # a size, count or length beyond this is no model or run that can exist


def check_int(name: str, value: Any, minimum: int = 1, maximum: int = LARGEST_INT) -> None:
    """`value` is an integer in [`minimum`, `maximum`] (minimum 1: "a positive integer"; `maximum` at most
    LARGEST_INT)."""
    maximum = min(maximum, LARGEST_INT)
    if not is_int(value) or not minimum <= value <= maximum:
        fail(name, value, int_range(minimum, maximum, above=is_int(value) and value > maximum))


def int_range(minimum: int | None, maximum: int = LARGEST_INT, above: bool = False) -> str:
    """An integer in [`minimum`, `maximum`], in words: "a positive integer", or, for a value `above` the maximum,
    "an integer >= 0 (at most 2**31 - 1)" or "an integer in [0, 1000000]" (the maximum is said only to a value
    above it: `--heads 0` is "not a positive integer", `--heads 5000` "not an integer in [1, 1024]")."""
    if above and maximum < LARGEST_INT:
        return f"an integer <= {maximum}" if minimum is None else f"an integer in [{minimum}, {maximum}]"
    kind = "an integer" if minimum is None else "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    return f"{kind} (at most 2**31 - 1)" if above else kind


def check_number(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """`value` is a number in the interval given by `low` / `high` (closed unless `*_open`)."""
    ok = is_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        fail(name, value, number_interval(low, high, low_open, high_open))


def check_choice(name: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    """`value` is one of `allowed`."""
    if value not in allowed:
        fail(name, value, f"one of {', '.join(map(str, allowed))}")


KIND_NAMES = {
    "int": "an integer",
    "float": "a finite number",
    "bool": "true or false",
    "str": "a string",
    "dict": "a mapping",
    "None": "None",
}


def check_field_kinds(settings: Any, prefix: str, names: tuple[str, ...] | None = None) -> None:
    """Every field of the dataclass `settings` holds a value of its annotated kind: a real bool for `bool`, an int
    (not a bool) for `int`, a finite number for `float`, a string for `str`, a mapping for `dict`, a list of the
    item kind for `list[...]`; `X | None` also takes None. Raises the `fail` error named `{prefix}{field}`
    ("Config." + "d_model"). `names`: only these fields. An owner runs its own checks of ranges and choices first
    (their messages say more), then this one over every field."""
    for f in dataclasses.fields(settings):
        if names is not None and f.name not in names:
            continue
        kinds = [kind.strip() for kind in str(f.type).split("|")]
        value = getattr(settings, f.name)
        if not any(_has_kind(value, kind) for kind in kinds):
            fail(f"{prefix}{f.name}", value, ", or ".join(_kind_name(kind) for kind in kinds))


def _has_kind(value: Any, kind: str) -> bool:
    if kind.startswith(("list[", "tuple[")):
        items = [item.strip() for item in kind[kind.index("[") + 1 : -1].split(",")]
        return isinstance(value, (list, tuple)) and all(
            _has_kind(item, items[min(i, len(items) - 1)]) for i, item in enumerate(value)
        )
    checks = {
        "int": is_int,
        "float": is_number,
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "dict": lambda v: isinstance(v, Mapping),
        "None": lambda v: v is None,
    }
    return checks[kind](value) if kind in checks else True


def _kind_name(kind: str) -> str:
    if kind.startswith(("list[", "tuple[")):
        return f"a list of {kind[kind.index('[') + 1 : -1]}"
    return KIND_NAMES.get(kind, kind)


def number_interval(low: float | None, high: float | None, low_open: bool = False, high_open: bool = False) -> str:
    """What a number in the interval is, in words: "a number in [0, 1)", "a number > 0", "a finite number"."""
    if low is not None and high is not None:
        return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"a number {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"a number {'<' if high_open else '<='} {high:g}"
    return "a finite number"


def check_token_in_vocabulary(name: str, value: Any, vocab_size: int, why: str) -> None:
    """Raise `ValueError` unless `value` is a token id in [0, vocab_size): for the uses that feed a
    special token id to the model or write it into its output. `name` is the field or argument,
    `why` says what needs it as a token."""
    if not (is_int(value) and 0 <= value < vocab_size):
        fail(name, value, f"a token id in [0, vocab_size={vocab_size}): {why}")
