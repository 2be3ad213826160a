"""Spread over seeds (`experiments.seeds.stats`): Student's t quantiles against the published table, the interval
of a mean, and paired comparisons."""

from __future__ import annotations

import math
import random

import pytest

from posformer.experiments.seeds.stats import compare, spread, t_quantile

# two-sided 95% (0.975) and one-sided 95% critical values of Student's t, from the standard table (e.g. NIST/SEMATECH
# e-Handbook of Statistical Methods, 1.3.6.7.2)
PUBLISHED = [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 10, 2.228), (0.975, 30, 2.042),
             (0.95, 2, 2.920), (0.95, 10, 1.812), (0.995, 5, 4.032)]  # fmt: skip


@pytest.mark.parametrize(("probability", "dof", "value"), PUBLISHED)
def test_t_quantiles_match_the_published_table(probability, dof, value) -> None:
    assert t_quantile(probability, dof) == pytest.approx(value, abs=1e-3)


def test_t_quantile_tends_to_the_normal_one() -> None:
    assert t_quantile(0.975, 100_000) == pytest.approx(1.95996, abs=1e-4)


def test_t_quantile_refuses_what_has_no_quantile() -> None:
    with pytest.raises(ValueError, match="0.5 < probability < 1"):
        t_quantile(0.3, 2)


def test_the_interval_is_the_mean_plus_minus_t_times_the_standard_error() -> None:
    values = [0.2, 0.5, 0.35]
    found = spread(values)
    sd = math.sqrt(sum((v - 0.35) ** 2 for v in values) / 2)
    t = math.sqrt(2) * 0.95 / math.sqrt(1 - 0.95**2)  # the 0.975 quantile of t with 2 dof, in closed form
    assert found.mean == pytest.approx(0.35)
    assert found.interval == pytest.approx((0.35 - t * sd / math.sqrt(3), 0.35 + t * sd / math.sqrt(3)))
    assert found.cell(2) == "0.35 [-0.02, 0.72]" and found.cell(2, (0.0, 1.0)) == "0.35 [0.00, 0.72]"


def test_one_seed_has_no_interval_and_calls_nothing() -> None:
    assert spread([0.4]).interval is None and spread([0.4]).cell(1) == "0.4"
    assert not compare([0.9], [0.1]).separated


def test_the_interval_covers_the_true_mean_about_95_times_in_100() -> None:
    draws = random.Random(0)
    covered = 0
    for _ in range(2000):
        low, high = spread([draws.gauss(1.0, 2.0) for _ in range(3)]).interval
        covered += low <= 1.0 <= high
    assert 0.93 < covered / 2000 < 0.97


def test_a_paired_comparison_sees_through_what_the_seeds_share() -> None:
    # the seeds move both rows together: unpaired, their ranges overlap; paired, a is higher in every seed
    a, b = [0.30, 0.60, 0.90], [0.25, 0.56, 0.84]
    found = compare(a, b)
    assert found.separated and (found.a_higher, found.b_higher) == (3, 0)
    assert found.verdict("alibi", "rope") == "alibi better, in 3 of 3 seeds"
    assert compare(a, b).verdict("alibi", "rope", higher_is_better=False) == "rope better, in 3 of 3 seeds"
    mixed = compare([0.5, 0.4, 0.6], [0.45, 0.5, 0.55])
    assert not mixed.separated and mixed.verdict("a", "b") == "not separated (a better in 2, b in 1 of 3 seeds)"


def test_a_comparison_needs_the_same_seeds() -> None:
    with pytest.raises(ValueError, match="the same seeds"):
        compare([1.0, 2.0], [1.0])


def test_a_value_every_seed_gives_is_shown_alone() -> None:
    assert spread([0.0, 0.0, 0.0]).cell(3) == "0.000" and spread([0.5, 0.5]).interval == (0.5, 0.5)
