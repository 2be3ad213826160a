"""Attention whose weights are not a softmax: out_i = sum_j w_ij v_j with w from the scaled scores by a rule the
caller gives (stick-breaking attention: `positions.stick_breaking`). The weights need not sum to 1.

The weights are made one block of queries at a time: past a size (`modules.bias_blocks.BIAS_BYTES`), so that no
(T, S) tensor per head outlives a block, each block checkpointed with gradients on (its weights recomputed in the
backward); and on the CPU in blocks of `causal_blocks.BLOCK_ROWS` as softmax attention runs there. Each block
reads the keys up to its last query only (the rule serves causal attention), so blocks skip the pairs past it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from posformer.ops.grouped_heads import grouped_scores, grouped_values
from posformer.ops.masks import AttentionMask

# weigh(scores, seen, q_index): scores (B, H, rows, keys) float32, seen (B or 1, 1, rows, keys) bool (the keys
# the mask lets each query see), q_index (rows,) each query's index among the keys -> weights (B, H, rows, keys)
KeyWeights = Callable[[Tensor, Tensor, Tensor], Tensor]


def weighted_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask,
    scale: float,
    weigh: KeyWeights,
    rows: int | None,
    need_weights: bool = False,
    dropout: float = 0.0,
    recompute: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """sum_j weigh(scale * q.k)_ij v_j, the weights through `dropout`.

    q: (B, H, T, dh); k, v: (B, Hkv, S, dh), H a multiple of Hkv, the T queries the last T of the S keys; rows:
    queries per block, or None for all at once; recompute: checkpoint each block when gradients are on ->
    (B, H, T, dh) in q's dtype, and with `need_weights` the weights (B, H, T, S) (computed whole). Queries that
    `mask.query_keep` drops get a zero output. Without gradients each block writes its rows of one output: block
    outputs kept in a list between the (rows, S) temporaries each block frees keep glibc's heap from reusing them,
    and the resident memory then grows with T * S (stick-breaking at T = 8,192, one layer: 533 MB above the model
    that way, under MALLOC_MMAP_THRESHOLD_ 132 MB).
    """
    length, offset = q.shape[-2], k.shape[-2] - q.shape[-2]
    rows = length if need_weights or rows is None else rows
    training = torch.is_grad_enabled()
    in_place = not training and rows < length
    outputs, weights, out = [], [], None
    for start, end in query_rows(length, rows):
        keys = offset + end  # no query of the block sees a key after its last
        block = partial(_block, mask, scale, weigh, dropout, start, end, need_weights)
        args = (q[:, :, start:end], k[:, :, :keys], v[:, :, :keys])
        if recompute and rows < length and training:
            block_out, _ = checkpoint(block, *args, use_reentrant=False)
        else:
            block_out, block_weights = block(*args)
            weights.append(block_weights)
        if in_place:  # see above
            out = block_out.new_empty((*q.shape[:-1], v.shape[-1])) if out is None else out
            out[:, :, start:end] = block_out
        else:
            outputs.append(block_out)
    out = mask.zero_dropped_queries(out if in_place else torch.cat(outputs, dim=-2))
    return out, (weights[0] if need_weights else None)


def query_rows(length: int, rows: int) -> list[tuple[int, int]]:
    """The blocks [start, end) of `rows` queries that cover `length`."""
    return [(start, min(start + rows, length)) for start in range(0, length, rows)]


def _block(
    mask: AttentionMask,
    scale: float,
    weigh: KeyWeights,
    dropout: float,
    start: int,
    end: int,
    need_weights: bool,
    q: Tensor,
    k: Tensor,
    v: Tensor,
) -> tuple[Tensor, Tensor | None]:
    """Queries [start, end), q: (B, H, rows, dh), over k, v: (B, Hkv, keys, dh)."""
    keys = k.shape[-2]
    wide = torch.promote_types(q.dtype, torch.float32)
    scores = grouped_scores(q.to(wide), k.to(wide))
    offset = keys - (end - start)
    q_index = torch.arange(offset, keys, device=q.device)
    if mask.rule is None:
        seen = torch.ones(1, 1, 1, keys, dtype=torch.bool, device=q.device)
    else:
        seen = mask.rule.allowed(start, end, keys)
    weights = weigh(scores * scale, seen, q_index)
    dropped = F.dropout(weights, dropout, training=dropout > 0).to(v.dtype)
    out = grouped_values(dropped, v)
    return out, (weights.to(q.dtype) if need_weights else None)
