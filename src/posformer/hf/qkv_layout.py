"""Fused q/k/v projections laid out per head (GPT-NeoX, BLOOM) <-> posformer's [q; k; v] rows.

Hugging Face GPT-NeoX and BLOOM store one `query_key_value` linear whose output
rows are grouped by head: (n_heads, 3, head_dim), i.e. q_0 k_0 v_0 q_1 k_1 v_1 ...
posformer's `attn.qkv` stores (3, n_heads, head_dim): all queries, then keys, then values.
The same permutation applies to the weight (rows, d_model) and to the bias (rows,).
"""

from __future__ import annotations

from torch import Tensor

from posformer.hf.mapping import Rule


def per_head_to_ours(t: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """(n_heads * 3 * head_dim, ...) grouped by head -> (3 * n_heads * head_dim, ...) as [q; k; v]."""
    return t.unflatten(0, (n_heads, 3, head_dim)).transpose(0, 1).flatten(0, 2)


def ours_to_per_head(t: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """(3 * n_heads * head_dim, ...) as [q; k; v] -> (n_heads * 3 * head_dim, ...) grouped by head."""
    return t.unflatten(0, (3, n_heads, head_dim)).transpose(0, 1).flatten(0, 2)


def per_head_qkv(ours: str, theirs: str, n_heads: int, head_dim: int, bias: bool) -> list[Rule]:
    """Rules for `ours.weight` (and `.bias`) <- the per-head fused `theirs.weight` (and `.bias`)."""
    suffixes = ("weight", "bias") if bias else ("weight",)
    return [
        Rule(
            f"{ours}.{s}",
            (f"{theirs}.{s}",),
            lambda ts: per_head_to_ours(ts[0], n_heads, head_dim),
            lambda t: [ours_to_per_head(t, n_heads, head_dim)],
        )
        for s in suffixes
    ]
