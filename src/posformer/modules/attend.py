"""`attend`: the one kernel every attention module calls, softmax(scale * q.k + bias + mask) v, dispatched to SDPA,
FlexAttention or the eager kernel (with blocks of queries on the CPU, and bf16 training on the CPU written out as
batched matmuls: `posformer.ops.cpu_half_attention`), with Shaw's values term and learned sinks.

Shapes: B batch, T query length, S key length, H query heads, Hkv key/value heads, dh head dim.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer.modules.bias_blocks import ValuesTerm
from posformer.ops.causal_blocks import causal_blocks_attention, query_blocks, use_causal_blocks
from posformer.ops.cpu_half_attention import cpu_half_attention, use_cpu_half_attention
from posformer.ops.flex import ScoreMod, flex_attend
from posformer.ops.mask_blocks import mask_blocks_attention, use_mask_blocks
from posformer.ops.masks import AttentionMask, causal_additive
from posformer.ops.softmax_attention import softmax_attention


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask,
    bias: Tensor | None,
    scale: float,
    dropout: float = 0.0,
    kernel: str = "sdpa",
    values: ValuesTerm | None = None,
    score_mod: ScoreMod | None = None,
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """softmax(scale * q.k + bias + mask) v, plus the `values` term of the probabilities when given.

    q: (B, H, T, dh); k, v: (B, Hkv, S, dh) with H a multiple of Hkv (GQA, MQA);
    bias: (B or 1, H, T, S) or None. `kernel`: "sdpa", "eager" (also whenever the
    `values` term needs the probabilities, or learned `sinks` (H,) join the softmax's denominator) or "flex"
    (`posformer.ops.flex`: the bias given as `score_mod` instead, no dropout). Queries that `mask.query_keep`
    drops get a zero output. On the CPU, a causal mask runs in blocks of queries where that pays
    (`posformer.ops.causal_blocks`); a mask with a rule (windows, chunks, documents, padding) too large to hold
    whole, in blocks of queries over the keys they may see (`posformer.ops.mask_blocks`).

    Returns the output (B, H, T, dh) and, with kernel "eager", the probabilities (B, H, T, S).
    """
    written_out = values is not None or sinks is not None  # the kernel must see the probabilities
    if kernel != "eager" and written_out and use_causal_blocks(q, bias, mask.is_causal):
        out, probs = _eager_in_blocks(q, k, v, bias, scale, dropout, values, sinks), None
    elif kernel == "eager" or written_out:
        out, probs = _eager(q, k, v, mask, bias, scale, dropout, values, sinks)
    elif kernel == "flex":
        out, probs = flex_attend(q, k, v, mask, score_mod, scale), None
    else:
        out, probs = _sdpa(q, k, v, mask, bias, scale, dropout), None
    return mask.zero_dropped_queries(out), probs


def _sdpa(
    q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, bias: Tensor | None, scale: float, dropout: float
) -> Tensor:
    if use_cpu_half_attention(q, k):
        return cpu_half_attention(q, k, v, _combine(bias, mask, q, k), scale, dropout)
    if use_causal_blocks(q, bias, mask.is_causal):
        return causal_blocks_attention(q, k, v, bias, scale, dropout)
    if use_mask_blocks(q, k, mask, bias):
        return mask_blocks_attention(q, k, v, mask, scale, dropout)
    additive = mask.additive if bias is None else _combine(bias, mask, q, k)
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=additive,
        is_causal=mask.is_causal and bias is None,
        scale=scale,
        dropout_p=dropout,
        enable_gqa=k.shape[1] != q.shape[1],
    )


def _eager(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask,
    bias: Tensor | None,
    scale: float,
    dropout: float,
    values: ValuesTerm | None,
    sinks: Tensor | None,
) -> tuple[Tensor, Tensor]:
    return softmax_attention(
        q,
        k,
        v,
        _combine(bias, mask, q, k),
        mask.query_keep,
        scale,
        dropout,
        None if values is None else partial(values, rows=slice(None)),
        sinks,
    )


def _eager_in_blocks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None,
    scale: float,
    dropout: float,
    values: ValuesTerm | None,
    sinks: Tensor | None,
) -> Tensor:
    """The eager path under a plain causal mask, one block of queries at a time against the keys up to its last."""
    outputs = []
    for start, end, block_mask in query_blocks(q.shape[-2], bias, q.dtype, q.device):
        additive = block_mask if bias is not None else causal_additive(end - start, end, q.dtype, q.device)
        out, _ = softmax_attention(
            q[:, :, start:end],
            k[:, :, :end],
            v[:, :, :end],
            additive,
            None,
            scale,
            dropout,
            None if values is None else partial(values, rows=slice(start, end)),
            sinks,
        )
        outputs.append(out)
    return torch.cat(outputs, dim=-2)


def _combine(bias: Tensor | None, mask: AttentionMask, q: Tensor, k: Tensor) -> Tensor | None:
    """bias (B or 1, H, T, S) plus the materialised mask, in q's dtype."""
    if bias is None:
        return mask.materialized(q.shape[2], k.shape[2], q.dtype, q.device)
    return mask.with_bias(bias, q.dtype)
