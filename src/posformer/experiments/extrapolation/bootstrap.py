"""Confidence intervals of perplexities and of their ratios: the percentile bootstrap over evaluation blocks; of a
difference in exact match between two models: the same bootstrap over the prompts both were given.

The evaluation tokens are cut into blocks of the longest eval length (`evaluation.BlockLosses`); a block holds
the same text at every length. One resample draws as many blocks as there are, with replacement, and computes
exp(sum NLL / sum tokens) over them; the interval is the (1 - level)/2 and (1 + level)/2 quantiles over the
resamples (Efron & Tibshirani 1993, ch. 13). A ratio ppl_a / ppl_b resamples the same block indices for both
(paired): the text that is hard at one length is hard at the other, so the ratio's interval is much narrower
than the two intervals of its parts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

RESAMPLES = 2000
LEVEL = 0.95


def _draws(n_blocks: int, resamples: int, seed: int) -> Tensor:
    """(resamples, n_blocks) block indices drawn with replacement."""
    if n_blocks < 2:
        raise ValueError(f"bootstrap: {n_blocks} evaluation block(s); at least 2 are needed for an interval")
    return torch.randint(0, n_blocks, (resamples, n_blocks), generator=torch.Generator().manual_seed(seed))


def _log_ppl(nll: Sequence[float], count: Sequence[int], draws: Tensor) -> Tensor:
    """(resamples,) log perplexity of each resample."""
    nll_t, count_t = torch.as_tensor(nll, dtype=torch.float64), torch.as_tensor(count, dtype=torch.float64)
    return nll_t[draws].sum(1) / count_t[draws].sum(1)


def _quantiles(log_values: Tensor, level: float) -> tuple[float, float]:
    low, high = torch.quantile(log_values, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return float(low.exp()), float(high.exp())


def ppl_interval(
    nll: Sequence[float], count: Sequence[int], resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """The `level` interval of the perplexity exp(sum nll / sum count) over blocks (nll[i], count[i])."""
    return _quantiles(_log_ppl(nll, count, _draws(len(nll), resamples, seed)), level)


def ratio_interval(
    a: tuple[Sequence[float], Sequence[int]],
    b: tuple[Sequence[float], Sequence[int]],
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """The `level` interval of ppl(a) / ppl(b), a and b = (nll per block, count per block) over the same blocks."""
    if len(a[0]) != len(b[0]):
        raise ValueError(
            f"bootstrap: the ratio's parts have {len(a[0])} and {len(b[0])} blocks; "
            "they must be scored on the same blocks"
        )
    draws = _draws(len(a[0]), resamples, seed)
    return _quantiles(_log_ppl(*a, draws) - _log_ppl(*b, draws), level)


def difference_interval(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """The `level` interval of mean(a) - mean(b), a and b (n, m) scores of the same n prompts (a key, say) in m
    cells each (its depths): a resample draws n prompts with replacement, each with all its cells, for both."""
    a_t, b_t = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if a_t.shape != b_t.shape or a_t.dim() != 2:
        raise ValueError(f"bootstrap: paired scores of shapes {tuple(a_t.shape)} and {tuple(b_t.shape)}; expected "
                         "the same (prompts, cells)")  # fmt: skip
    draws = _draws(a_t.shape[0], resamples, seed)
    differences = a_t[draws].mean((1, 2)) - b_t[draws].mean((1, 2))
    low, high = torch.quantile(differences, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return float(low), float(high)
