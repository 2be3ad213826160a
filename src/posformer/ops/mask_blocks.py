"""Attention under a mask with a rule (sliding windows, chunks, packed documents, padding), one block of queries at
a time, so that no (T, S) mask is ever held whole.

The whole additive mask of a rule is (B or 1, 1, T, S) floats: 1 GiB at 16k tokens in float32, held for the
forward by every layer that reads it. Cut into blocks of `BLOCK_ROWS` queries, each block builds its own rows of the
mask and reads only the keys its queries may see: from the first key the earliest of them sees (the window's or
the chunk's start) to the last key the latest of them sees (a causal rule). Memory then grows with T times the
block (times the span a window or a chunk allows), not with T * S, and SDPA computes only the pairs of that span.
The output equals SDPA over the whole mask: each query's keys outside [lo, hi) are masked there anyway.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer.ops.masks import AttentionMask, additive_of

BLOCK_ROWS = 256
WHOLE_MASK_MAX_BYTES = 32 * 2**20  # a whole mask larger than this runs in blocks


def use_mask_blocks(q: Tensor, k: Tensor, mask: AttentionMask, bias: Tensor | None) -> bool:
    """Whether `mask_blocks_attention` should run: no bias, a mask with a rule beyond plain causal order, more than
    one block of queries, and a whole additive mask above WHOLE_MASK_MAX_BYTES."""
    rule = mask.rule
    if bias is not None or rule is None or mask.is_causal or q.shape[-2] <= BLOCK_ROWS:
        return False
    rows = 1 if rule.key_keep is None and rule.documents is None else q.shape[0]
    whole = rows * q.shape[-2] * k.shape[-2] * torch.finfo(q.dtype).bits // 8
    return whole > WHOLE_MASK_MAX_BYTES


def _key_span(mask: AttentionMask, start: int, end: int) -> tuple[int, int]:
    """[lo, hi): the keys any query of [start, end) may see, in any row."""
    rule = mask.rule
    first_slot, last_slot = start + rule.offset, end - 1 + rule.offset
    hi = min(rule.k_len, last_slot + 1) if rule.causal else rule.k_len
    lo = 0
    if rule.window is not None:  # W - 1 keys back, and as many ahead in a bidirectional window
        lo = max(lo, first_slot - rule.window + 1)
        hi = hi if rule.causal else min(hi, last_slot + rule.window)
    if rule.causal and rule.chunk is not None:
        slot = torch.tensor([first_slot], device=rule.device)
        lo = max(lo, int(rule.chunk_start(slot).min()))
    return min(lo, hi - 1) if hi > 0 else 0, hi


def mask_blocks_attention(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, scale: float, dropout: float) -> Tensor:
    """softmax(scale * q.k + mask) v in blocks of queries: q (B, H, T, dh), k and v (B, Hkv, S, dh) -> (B, H, T, dh).
    Queries that see no key get what the whole mask gives them (a uniform row), which `attend` then zeroes."""
    outputs = []
    for start in range(0, q.shape[-2], BLOCK_ROWS):
        end = min(start + BLOCK_ROWS, q.shape[-2])
        lo, hi = _key_span(mask, start, end)
        allowed = mask.rule.allowed(start, end, hi)[..., lo:]
        outputs.append(
            F.scaled_dot_product_attention(
                q[:, :, start:end],
                k[:, :, lo:hi],
                v[:, :, lo:hi],
                attn_mask=additive_of(allowed, q.dtype),
                scale=scale,
                dropout_p=dropout,
                enable_gqa=k.shape[1] != q.shape[1],
            )
        )
    return torch.cat(outputs, dim=-2)
