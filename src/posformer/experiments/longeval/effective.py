"""A model's effective length: the longest length at which its mean score over the suite's tasks stays above a
threshold (RULER, Hsieh et al. 2024, section 4).

Two thresholds:
  absolute  RULER's rule: a fixed score, by default RULER's 85.6%, the mean of Llama-2-7B at 4K tokens (its own
            length) on RULER's 13 tasks. Ours are easier and other tasks, so the number is a convention here.
  relative  a fixed fraction of the model's own mean at a reference length (its training length L, say): the
            longest length that keeps `fraction` of what the model does at L. Fit for small models that do not
            reach 85.6% anywhere.
Every evaluated length up to the effective length must exceed the threshold (strictly): a length that passes
after a shorter one failed does not count. RULER reports the largest length above its threshold, which in its
tables is the same, the scores falling with length.
"""

from __future__ import annotations

from collections.abc import Mapping

RULER_THRESHOLD = 0.856


def threshold_for(means: Mapping[int, float], threshold: float, reference: int | None = None) -> float:
    """The score to exceed: `threshold` itself (absolute), or threshold x the mean at length `reference`."""
    if not 0 < threshold <= 1:
        raise ValueError(f"longeval: threshold={threshold} is out of range: expected a number in (0, 1]")
    if reference is None:
        return threshold
    if reference not in means:
        raise ValueError(
            f"longeval: reference length {reference} was not evaluated: expected one of {', '.join(map(str, means))}"
        )
    return threshold * means[reference]


def effective_length(means: Mapping[int, float], threshold: float) -> int | None:
    """The longest length L such that the mean at every evaluated length <= L exceeds `threshold`; None when the
    shortest length does not."""
    found = None
    for length in sorted(means):
        if not means[length] > threshold:
            break
        found = length
    return found


def rule_text(threshold: float, reference: int | None, score: float) -> str:
    """The rule in words, for a report: `threshold` as asked, `score` what it comes to (`threshold_for`)."""
    if reference is None:
        return f"the longest length up to which the mean exact match exceeds {score:.3f} at every length (RULER)"
    return (
        f"the longest length up to which the mean exact match exceeds {threshold:g} x the mean at {reference} "
        f"= {score:.3f} at every length"
    )
