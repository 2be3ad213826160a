"""Attention written out: softmax(scale * q.k + additive) v, with the probabilities at hand for a term of them
(Shaw's a^V) and for `need_weights`, and learned attention sinks in the softmax's denominator. The one eager
kernel the attention paths share."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def softmax_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    additive: Tensor | None,
    query_keep: Tensor | None,
    scale: float,
    dropout: float,
    values: Callable[[Tensor], Tensor | None] | None,
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(scale * q.k + additive) v + values(probs), and probs.

    q: (B, H, T, dh); k, v: (B, Hkv, S, dh) with H a multiple of Hkv; additive: broadcastable to (B, H, T, S);
    query_keep: (B, T) bool or None (dropped queries get zero probabilities) -> (B, H, T, dh), (B, H, T, S).
    The softmax runs in float32 or wider. sinks: (H,) learned logits of a key that every query sees and whose
    value is zero (GPT-OSS): each row's probabilities are multiplied by Z / (Z + e^s) = sigmoid(lse - s), lse the
    log of the row's softmax denominator Z, so that they sum to less than 1.
    """
    repeat = q.shape[1] // k.shape[1]
    if repeat > 1:
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    scores = torch.matmul(q * scale, k.transpose(-1, -2))  # (B, H, T, S); the scale on the (T, dh) operand
    if additive is not None:
        scores = scores + additive
    wide = torch.promote_types(q.dtype, torch.float32)
    probs = torch.softmax(scores, dim=-1, dtype=wide)
    if sinks is not None:
        probs = probs * torch.sigmoid(
            torch.logsumexp(scores.to(wide), -1, keepdim=True) - sinks.to(wide)[:, None, None]
        )
    probs = probs.to(q.dtype)
    if query_keep is not None:
        probs = probs * query_keep[:, None, :, None].to(probs.dtype)
    dropped = F.dropout(probs, dropout, training=dropout > 0)
    out = torch.matmul(dropped, v)
    extra = None if values is None else values(dropped)
    return (out if extra is None else out + extra), probs
