"""Spread over seeds: the mean of a measure over independent seeds with its Student-t interval, and paired
comparisons of two rows seed by seed.

A seed fixes a run's initial weights, data order and every draw; rows of one seed share them (`experiments`).
Over S seeds a measure x_1..x_S has the interval mean ± t_{S-1, (1+level)/2} · sd / sqrt(S) (Student 1908; the
sd with S - 1 in its denominator). Two rows are compared on the same seeds by their differences d_s = a_s - b_s
(a paired t interval): the comparison is *separated* only when that interval excludes 0, and the report also says
in how many seeds a beat b. With one seed there is no interval (None): nothing is called.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95


def _within(x: float, dof: int) -> float:
    """P(|T| < x) for T ~ Student t with `dof` degrees of freedom: the finite series of Abramowitz & Stegun 26.7.3
    (odd dof) and 26.7.4 (even), in theta = atan(x / sqrt(dof))."""
    theta = math.atan(x / math.sqrt(dof))
    cos2 = math.cos(theta) ** 2
    if dof % 2:
        term = total = math.cos(theta) if dof > 1 else 0.0
        for k in range(1, (dof - 1) // 2):
            term *= cos2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * total)
    term = total = 1.0
    for k in range(1, dof // 2):
        term *= cos2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


@functools.lru_cache(maxsize=256)
def t_quantile(probability: float, dof: int) -> float:
    """The `probability` quantile (> 0.5) of Student's t with `dof` >= 1 degrees of freedom, by bisection on its
    distribution function P(T < q) = (1 + P(|T| < q)) / 2."""
    if not 0.5 < probability < 1 or dof < 1:
        raise ValueError(f"t_quantile: expected 0.5 < probability < 1 and dof >= 1, got {probability}, {dof}")
    within = 2 * probability - 1
    low, high = 0.0, 1.0
    while _within(high, dof) < within:
        low, high = high, 2 * high
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if _within(middle, dof) < within else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class Spread:
    """A measure over seeds: each seed's value, their mean, and the Student-t interval of the mean (None with one
    seed)."""

    values: tuple[float, ...]
    mean: float
    interval: tuple[float, float] | None

    def cell(self, digits: int = 3, bounds: tuple[float, float] | None = None, sign: bool = False) -> str:
        """'mean [low, high]', or the value alone with one seed or when every seed gives it; the interval
        clipped to `bounds` (the measure's range, as [0, 1] for an accuracy); `sign`: '+' before positive numbers
        (a difference)."""
        form = f"{'+' if sign else ''}.{digits}f"
        if self.interval is None or len(set(self.values)) == 1:  # one seed, or every seed the same: no spread
            return f"{self.mean:{form}}"
        low, high = self.interval
        if bounds is not None:
            low, high = max(low, bounds[0]), min(high, bounds[1])
        return f"{self.mean:{form}} [{low:{form}}, {high:{form}}]"


def exp_cell(found: Spread, digits: int = 2) -> str:
    """A spread of logs (of perplexities, of their ratios) shown as the geometric mean [interval]."""
    if found.interval is None or len(set(found.values)) == 1:
        return f"{math.exp(found.mean):.{digits}f}"
    low, high = found.interval
    return f"{math.exp(found.mean):.{digits}f} [{math.exp(low):.{digits}f}, {math.exp(high):.{digits}f}]"


def spread(values: Sequence[float], level: float = LEVEL) -> Spread:
    """The mean of `values` (one per seed) and its `level` Student-t interval."""
    if not values:
        raise ValueError("spread: no seed has a value")
    values = tuple(float(v) for v in values)
    mean = sum(values) / len(values)
    if len(values) < 2:
        return Spread(values, mean, None)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = t_quantile((1 + level) / 2, len(values) - 1) * sd / math.sqrt(len(values))
    return Spread(values, mean, (mean - half, mean + half))


@dataclass(frozen=True)
class Comparison:
    """Row a against row b on the same seeds: the spread of a - b, and in how many seeds a > b and a < b."""

    difference: Spread
    a_higher: int
    b_higher: int

    @property
    def separated(self) -> bool:
        """Whether the interval of a - b excludes 0 (never with one seed)."""
        found = self.difference.interval
        return found is not None and (found[0] > 0 or found[1] < 0)

    def verdict(self, a: str, b: str, higher_is_better: bool = True) -> str:
        """'a better, in k of n seeds' when separated (better read by `higher_is_better`), else 'not separated
        (a better in i, b in j of n seeds)'."""
        seeds = len(self.difference.values)
        a_better, b_better = (self.a_higher, self.b_higher) if higher_is_better else (self.b_higher, self.a_higher)
        if not self.separated:
            return f"not separated ({a} better in {a_better}, {b} in {b_better} of {seeds} seeds)"
        winner, count = (a, a_better) if (self.difference.mean > 0) == higher_is_better else (b, b_better)
        return f"{winner} better, in {count} of {seeds} seeds"


def compare(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Comparison:
    """a and b: one value per seed, the same seeds in the same order."""
    if len(a) != len(b):
        raise ValueError(f"compare: {len(a)} and {len(b)} seeds; a paired comparison needs the same seeds")
    differences = [x - y for x, y in zip(a, b)]
    return Comparison(spread(differences, level), sum(d > 0 for d in differences), sum(d < 0 for d in differences))
