"""FlexAttention (`Config.attn_impl="flex"`): the position bias as a `score_mod`, never a (B, H, T, S) tensor.

PyTorch's FlexAttention compiles the attention, the encoding's bias (a lookup in a
(heads, distances) table, `PositionEncoding.score_mod`) and the mask into one
kernel of flash-attention class, which skips the blocks a causal mask hides. It
runs under `torch.compile`, compiled here once per shape (static shapes: Inductor's
CPU template fails to build with dynamic ones in torch 2.13); past
`torch._dynamo.config.recompile_limit` shapes PyTorch runs its unfused version and warns. A decoding step (one
query) instead adds its (H, S) bias, read from the same score_mod, in SDPA. On the
CPU PyTorch gives FlexAttention a forward only: training there needs attn_impl
"sdpa" (the same model and weights). On a GPU, heads narrower than 16 are padded with zero columns.
Shapes: B batch, H query heads, Hkv key/value heads, T query length, S key length, dh head dim.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer.ops.masks import AttentionMask

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]  # FlexAttention's (score, b, h, q, kv)

GPU_MIN_HEAD_DIM = 16  # the GPU kernel's matrix products (Triton's tl.dot) take no narrower heads


@functools.cache
def _kernel() -> Callable[..., Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=32)
def _causal_blocks(q_len: int, k_len: int, device: str):
    """The block mask of query i seeing keys 0..i (the top-left causal order of `AttentionMask.is_causal`)."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, q_len, k_len, device=device)


def _with_mask(score_mod: ScoreMod | None, additive: Tensor | None, q_len: int, k_len: int) -> ScoreMod | None:
    """score_mod followed by adding the materialised mask additive (B or 1, 1, T or 1, S); either may be None."""
    if additive is None:
        return score_mod
    one_row = additive.shape[0] == 1
    additive = additive.expand(-1, -1, q_len, k_len)

    def masked(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        score = score if score_mod is None else score_mod(score, b, h, q_idx, kv_idx)
        return score + additive[0 if one_row else b, 0, q_idx, kv_idx].to(score.dtype)

    return masked


def flex_attend(
    q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, score_mod: ScoreMod | None, scale: float
) -> Tensor:
    """softmax(scale * q.k + score_mod + mask) v through FlexAttention.

    q: (B, H, T, dh); k, v: (B, Hkv, S, dh) -> (B, H, T, dh). RuntimeError on the CPU when a gradient
    would be needed (PyTorch has no FlexAttention backward there).
    """
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RuntimeError(
            "attn_impl='flex' runs forward only on the CPU (PyTorch's FlexAttention has no CPU backward): run "
            "inference under torch.no_grad(), or train with attn_impl='sdpa' (the same weights) or on a GPU"
        )
    gqa = k.shape[1] != q.shape[1]
    scores = _with_mask(score_mod, mask.additive, q.shape[2], k.shape[2])
    if q.shape[2] == 1:  # a decoding step: one query, S bias values a head, and a kernel compiled per key length
        bias = None if scores is None else _evaluated(scores, q.shape[0], q.shape[1], k.shape[2], q.device).to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale, enable_gqa=gqa)
    blocks = _causal_blocks(q.shape[2], k.shape[2], str(q.device)) if mask.is_causal else None
    head_dim = q.shape[-1]
    if q.device.type != "cpu" and head_dim < GPU_MIN_HEAD_DIM:  # zero columns change neither q.k nor the kept output
        q, k, v = (F.pad(t, (0, GPU_MIN_HEAD_DIM - head_dim)) for t in (q, k, v))
    out = _kernel()(q, k, v, score_mod=scores, block_mask=blocks, scale=scale, enable_gqa=gqa)
    return out[..., :head_dim]


def _evaluated(score_mod: ScoreMod, batch: int, heads: int, k_len: int, device: torch.device) -> Tensor:
    """What score_mod adds for one query, on the whole grid by ordinary indexing: (B or 1, H, 1, S)."""
    b, h, q_idx, kv_idx = (
        torch.arange(n, device=device).view([-1 if d == i else 1 for d in range(4)])
        for i, n in enumerate((batch, heads, 1, k_len))
    )
    return score_mod(torch.zeros((), device=device), b, h, q_idx, kv_idx)
