"""Spread over seeds: the mean of a measure over independent seeds with its Student-t interval, and paired
comparisons of two rows seed by seed.

A seed fixes a run's initial weights, data order and every draw; rows of one seed share them (`experiments`).
Over S seeds a measure x_1..x_S has the interval mean ± t_{S-1, (1+level)/2} · sd / sqrt(S) (Student 1908; the
sd with S - 1 in its denominator). Two rows are compared on the same seeds by their differences d_s = a_s - b_s
(a paired t interval): the comparison is *separated* only when that interval excludes 0, and the report also says
in how many seeds a beat b. With one seed there is no interval (None): nothing is called.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95


def _t_density(x: float, dof: int) -> float:
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    return math.exp(log_norm - (dof + 1) / 2 * math.log1p(x * x / dof))


def _t_cdf_above_zero(x: float, dof: int, steps: int = 2000) -> float:
    """P(0 < T < x) for T ~ Student t with `dof` degrees of freedom, x >= 0 (Simpson's rule, `steps` even)."""
    h = x / steps
    total = _t_density(0.0, dof) + _t_density(x, dof)
    total += sum((4 if i % 2 else 2) * _t_density(i * h, dof) for i in range(1, steps))
    return total * h / 3


def t_quantile(probability: float, dof: int) -> float:
    """The `probability` quantile (> 0.5) of Student's t with `dof` >= 1 degrees of freedom, by bisection on its
    distribution function (P(T < q) = 0.5 + P(0 < T < q))."""
    if not 0.5 < probability < 1 or dof < 1:
        raise ValueError(f"t_quantile: expected 0.5 < probability < 1 and dof >= 1, got {probability}, {dof}")
    low, high = 0.0, 1.0
    while 0.5 + _t_cdf_above_zero(high, dof) < probability:
        low, high = high, 2 * high
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if 0.5 + _t_cdf_above_zero(middle, dof) < probability else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class Spread:
    """A measure over seeds: each seed's value, their mean, and the Student-t interval of the mean (None with one
    seed)."""

    values: tuple[float, ...]
    mean: float
    interval: tuple[float, float] | None

    def cell(self, digits: int = 3, bounds: tuple[float, float] | None = None, sign: bool = False) -> str:
        """'mean [low, high]', or the value alone with one seed; the interval clipped to `bounds` (the measure's
        range, as [0, 1] for an accuracy); `sign`: '+' before positive numbers (a difference)."""
        form = f"{'+' if sign else ''}.{digits}f"
        if self.interval is None:
            return f"{self.mean:{form}}"
        low, high = self.interval
        if bounds is not None:
            low, high = max(low, bounds[0]), min(high, bounds[1])
        return f"{self.mean:{form}} [{low:{form}}, {high:{form}}]"


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
        """'a > b' / 'a < b' when separated (with 'better' read by `higher_is_better`), else 'not separated'."""
        seeds = len(self.difference.values)
        count = f"in {max(self.a_higher, self.b_higher)} of {seeds} seeds"
        if not self.separated:
            return f"not separated ({a} higher in {self.a_higher}, {b} in {self.b_higher} of {seeds} seeds)"
        a_wins = (self.difference.mean > 0) == higher_is_better
        return f"{a} better, {count}" if a_wins else f"{b} better, {count}"


def compare(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Comparison:
    """a and b: one value per seed, the same seeds in the same order."""
    if len(a) != len(b):
        raise ValueError(f"compare: {len(a)} and {len(b)} seeds; a paired comparison needs the same seeds")
    differences = [x - y for x, y in zip(a, b)]
    return Comparison(spread(differences, level), sum(d > 0 for d in differences), sum(d < 0 for d in differences))
