"""Choosing the next token from the scores: greedy, or sampling with temperature, top-k and top-p."""

from __future__ import annotations

import torch
from torch import Tensor


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to -inf every logit outside the top-k and outside the smallest set of mass >= top_p.

    logits: (B, V) -> (B, V).
    """
    if top_k is not None and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cumulative - sorted_logits.softmax(-1) >= top_p  # keep the token that crosses top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def warp(scores: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """The scores sampling draws from: divided by `temperature`, then filtered by top-k and top-p (Hugging Face's
    order). scores: (B, V) float32 -> (B, V)."""
    return filter_logits(scores / temperature, top_k, top_p)


def choose(scores: Tensor, do_sample: bool, generator: torch.Generator | None) -> Tensor:
    """One token per row: the argmax, or a draw from softmax(scores) with `generator`. scores: (B, V) -> (B,)."""
    if not do_sample:
        return scores.argmax(-1)
    return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(-1)


def next_token(
    logits: Tensor,
    do_sample: bool,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> Tensor:
    """Pick one token per row from raw logits: greedy, or sampled after `warp`. logits: (B, V) -> (B,)."""
    if not do_sample:
        return logits.argmax(-1)
    return choose(warp(logits.float(), temperature, top_k, top_p), True, generator)
