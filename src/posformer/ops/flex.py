"""FlexAttention (`Config.attn_impl="flex"`): the position bias as a `score_mod` and the mask as a block mask, never
a (B, H, T, S) bias nor a (B, T, S) mask.

PyTorch's FlexAttention compiles the attention, the encoding's bias (`PositionEncoding.score_mod`) and the mask into
one kernel of flash-attention class, which skips the blocks the mask hides. The mask (padding, causal order, a
sliding window) reaches it as a block mask made from its rule (`flex_blocks`); the bias as a score_mod that reads
tensors of O(T) per head at most:

- a distance table (H, distances): ALiBi, T5, KERPLE (`distance_table.DistanceTable`);
- a table per query and per key over the relative-position rows, looked up at the row of each pair: BERT's
  relative_key and relative_key_query (B, H, T, distances), DeBERTa's c2p and p2c (B, H, T, 2 buckets)
  (`positions.pair_scores`);
- FIRE's narrow MLP, evaluated in the kernel from its weights, of a (distances,) table and a (B, T) normaliser.

Refused (`PositionEncoding.flex_unfit`, checked by `Config`): Shaw (its values term a^V needs the probabilities),
CoPE (its positions are counted from the attention scores themselves) and Transformer-XL ((q_i + v).W_R R_{i-j} is
a product over the head dim for each pair, at unbounded distances: no table per query of bounded width).

It runs under `torch.compile`, compiled once per shape (static shapes: with dynamic ones, Inductor's CPU template
fails to build a kernel that reads a mask_mod's tensor, `cur_kvSplitSize1` undeclared, in torch 2.13), with a
recompile limit of its own (`RECOMPILE_LIMIT`, isolated from other compiled functions): past torch's global limit of
8 compiled variants, PyTorch would run its unfused version, which materialises the (B, H, T, S) scores (out of
memory on an H200 at T = 32,768). The numbers a score_mod or mask_mod reads are tensors, not Python ints, which
`torch.compile` would guard on, compiling once per value. A decoding step (one query) instead adds its (H, S) bias,
read from the same score_mod, in SDPA. On the CPU PyTorch gives FlexAttention a forward only: training there needs
attn_impl "sdpa" (the same model and weights). Heads narrower than `MIN_HEAD_DIM` are padded with zero columns, which
change neither q.k nor the kept output: on a GPU below 16, on the CPU below 32 (torch 2.13's CPU kernel returns wrong
values, or NaN, for heads of 8 or 16 when the number of keys is 8 more than a multiple of 16; 24 and up are right).
Shapes: B batch, H query heads, Hkv key/value heads, T query length, S key length, dh head dim.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer.ops.flex_blocks import block_mask
from posformer.ops.masks import AttentionMask

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]  # FlexAttention's (score, b, h, q, kv)

# the narrowest head each device's kernel is given: on a GPU, the matrix products (Triton's tl.dot) take no narrower;
# on the CPU, narrower ones go wrong at some key counts
MIN_HEAD_DIM = {"cpu": 32, "cuda": 16}
# compiled variants of the kernel (shapes, dtypes, encodings' score_mods, masks): torch's accumulated_recompile_limit,
# its cap over all compiled regions of one function
RECOMPILE_LIMIT = 256


@functools.cache
def _kernel() -> Callable[..., Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    if "recompile_limit" in inspect.signature(torch.compile).parameters:
        return torch.compile(flex_attention, dynamic=False, recompile_limit=RECOMPILE_LIMIT, isolate_recompiles=True)
    return _with_own_recompile_limit(torch.compile(flex_attention, dynamic=False))


def _with_own_recompile_limit(compiled: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Torch before 2.12 has no per-function recompile limit: raise the global ones for the kernel's calls alone."""
    import torch._dynamo.config as dynamo_config

    names = ("recompile_limit", "accumulated_recompile_limit")
    if not all(hasattr(dynamo_config, name) for name in names):
        names = ("cache_size_limit", "accumulated_cache_size_limit")

    def kernel(*args, **kwargs) -> Tensor:
        with dynamo_config.patch(**dict.fromkeys(names, RECOMPILE_LIMIT)):
            return compiled(*args, **kwargs)

    return kernel


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
    if q.shape[2] == 1:  # a decoding step: one query, S bias values a head, and no kernel compiled per key length
        additive = mask.materialized(1, k.shape[2], q.dtype, q.device)
        if score_mod is not None:
            bias = _evaluated(score_mod, q.shape[0], q.shape[1], k.shape[2], q.device).to(q.dtype)
            additive = bias if additive is None else torch.where(additive < 0, additive, bias)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=additive, scale=scale, enable_gqa=gqa)
    if mask.rule is None:
        blocks = None
    else:
        if "flex" not in mask.kernel_memo:  # once for all the layers of a forward
            mask.kernel_memo["flex"] = block_mask(mask.rule)
        blocks = mask.kernel_memo["flex"]
    narrowest, value_dim = MIN_HEAD_DIM.get(q.device.type, MIN_HEAD_DIM["cuda"]), v.shape[-1]
    # zero columns change neither q.k nor the kept output; q and k may be wider than v (PoPE)
    q, k, v = (F.pad(t, (0, narrowest - t.shape[-1])) if t.shape[-1] < narrowest else t for t in (q, k, v))
    out = _kernel()(q, k, v, score_mod=score_mod, block_mask=blocks, scale=scale, enable_gqa=gqa)
    return out[..., :value_dim]


def _evaluated(score_mod: ScoreMod, batch: int, heads: int, k_len: int, device: torch.device) -> Tensor:
    """What score_mod adds for one query, on the whole grid by ordinary indexing: (B or 1, H, 1, S)."""
    b, h, q_idx, kv_idx = (
        torch.arange(n, device=device).view([-1 if d == i else 1 for d in range(4)])
        for i, n in enumerate((batch, heads, 1, k_len))
    )
    return score_mod(torch.zeros((), device=device), b, h, q_idx, kv_idx)
