"""Hypothesis settings of the fuzz suite: `ci` (the default: the same examples every run, so a red CI is a real
regression) and `explore` (fresh random examples, ten times as many: `POSFORMER_FUZZ=explore make test`)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXPLORE = os.environ.get("POSFORMER_FUZZ") == "explore"


def fuzz(examples: int) -> settings:
    """The settings of a fuzz test that tries `examples` inputs in CI."""
    return settings(
        max_examples=examples * (10 if EXPLORE else 1),
        deadline=None,
        derandomize=not EXPLORE,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
