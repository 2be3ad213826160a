"""Attention written out: softmax(scale * q.k + additive) v, with the probabilities at hand for a term of them
(Shaw's a^V) and for `need_weights`. The one eager kernel the attention paths share."""

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
) -> tuple[Tensor, Tensor]:
    """softmax(scale * q.k + additive) v + values(probs), and probs.

    q: (B, H, T, dh); k, v: (B, Hkv, S, dh) with H a multiple of Hkv; additive: broadcastable to (B, H, T, S);
    query_keep: (B, T) bool or None (dropped queries get zero probabilities) -> (B, H, T, dh), (B, H, T, S).
    The softmax runs in float32 or wider.
    """
    repeat = q.shape[1] // k.shape[1]
    if repeat > 1:
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    scores = torch.matmul(q * scale, k.transpose(-1, -2))  # (B, H, T, S); the scale on the (T, dh) operand
    if additive is not None:
        scores = scores + additive
    probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(q.dtype, torch.float32)).to(q.dtype)
    if query_keep is not None:
        probs = probs * query_keep[:, None, :, None].to(probs.dtype)
    dropped = F.dropout(probs, dropout, training=dropout > 0)
    out = torch.matmul(dropped, v)
    extra = None if values is None else values(dropped)
    return (out if extra is None else out + extra), probs
