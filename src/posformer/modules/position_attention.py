"""The attention an encoding needs (`positions.contract.AttentionKind`), one strategy each, chosen once by
`SelfAttention` when it is built (`strategy_for`).

`SelfAttention` projects and rotates q, k and v, asks the strategy for the encoding's per-token terms before the
KV cache takes the keys, and hands it the heads (`Heads`); the strategy runs the kernel and returns the heads'
outputs. Shapes: B batch, T queries, S keys, H query heads, Hkv key/value heads, dh head dim.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, NamedTuple, cast

import torch
from torch import Tensor

from posformer.modules.bias_blocks import bias_block_rows
from posformer.ops import causal_blocks
from posformer.ops.flex import ScoreMod
from posformer.ops.masks import AttentionMask
from posformer.ops.packing import TokenPacking
from posformer.ops.weighted_attention import weighted_attention
from posformer.positions.contract import AttentionKind, PositionEncoding, ReadsHidden, ReplacesSoftmax

if TYPE_CHECKING:
    from posformer.modules.attention import Attention


class Heads(NamedTuple):
    """What a strategy attends over: q (B, H, T, dh) at q_pos (B, T); k, v (B, Hkv, S, dh) at k_pos (B, S), the
    cached keys first; the encoding's query terms (B, H, T, dq) and key terms (B, H, S, dk), or None; and the work
    on all the keys that every block of queries reads (`ReadsHidden.shared_key_work`), or None."""

    q: Tensor
    k: Tensor
    v: Tensor
    q_pos: Tensor
    k_pos: Tensor
    q_terms: Tensor | None = None
    k_terms: Tensor | None = None
    shared: tuple[Tensor, ...] | None = None


class SoftmaxAttention:
    """softmax(scale * q.k + bias) v (+ values): the encoding's `bias` hook, asked for by rows of queries
    (`modules.bias_blocks`), its `values` term, or under FlexAttention its `score_mod`."""

    def __init__(self, position: PositionEncoding, layer: int) -> None:
        self.position, self.layer = position, layer

    def token_terms(self, x: Tensor, packing: TokenPacking | None) -> tuple[Tensor | None, Tensor | None]:
        """The encoding's query and key terms of the attention's input x: none here."""
        return None, None

    def __call__(
        self, attention: Attention, heads: Heads, mask: AttentionMask, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """The heads' outputs (B, H, T, dh) and, with `need_weights`, the probabilities (B, H, T, S)."""
        q, k, v = heads.q, heads.k, heads.v
        values = partial(self._values, heads) if self.position.adds_values else None
        if attention.kernel == "flex" and not need_weights:
            return attention.run_kernel(q, k, v, mask, need_weights, values, score_mod=self.score_mod(heads))
        bias_rows = partial(self.bias_rows, heads) if self.position.adds_bias else None
        block_bytes = self.position.cpu_bias_block_bytes
        return attention.run_kernel(q, k, v, mask, need_weights, values, bias_rows=bias_rows, block_bytes=block_bytes)

    def score_mod(self, heads: Heads) -> ScoreMod | None:
        """The bias in FlexAttention's form (`positions.distance_table`)."""
        return self.position.score_mod(heads.q, heads.k, heads.q_pos, heads.k_pos, self.layer)

    def bias_rows(self, heads: Heads, start: int, end: int, keys: int) -> Tensor | None:
        """The encoding's bias of queries [start, end) over the first `keys` keys; the whole bias from the very
        tensors every layer gets, so that a bias computed once per forward is shared (`per_forward`)."""
        q, k, q_pos, k_pos = heads.q, heads.k, heads.q_pos, heads.k_pos
        if (start, end, keys) != (0, q.shape[-2], k.shape[-2]):
            q, k, q_pos, k_pos = q[:, :, start:end], k[:, :, :keys], q_pos[:, start:end], k_pos[:, :keys]
        return self.position.bias(q, k, q_pos, k_pos, self.layer)

    def _values(self, heads: Heads, probs: Tensor, rows: slice) -> Tensor | None:
        """The encoding's `values` term for the queries `rows` over the first probs.shape[-1] keys."""
        return self.position.values(probs, heads.q_pos[:, rows], heads.k_pos[:, : probs.shape[-1]], self.layer)


class HiddenTermsAttention(SoftmaxAttention):
    """Softmax with a bias from the encoding's terms of the hidden states (`ReadsHidden`: FoX, PaTH). The work on the
    keys that every block of queries reads (`shared_key_work`: PaTH's carried keys and chunk transforms) is done
    once per call, before the blocks; in training the checkpointed blocks read it and their gradients reach it."""

    def __call__(
        self, attention: Attention, heads: Heads, mask: AttentionMask, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        reader = cast(ReadsHidden, self.position)
        shared = reader.shared_key_work(heads.k_terms, heads.k, self.layer)
        return super().__call__(attention, heads._replace(shared=shared), mask, need_weights)

    def token_terms(self, x: Tensor, packing: TokenPacking | None) -> tuple[Tensor | None, Tensor | None]:
        """x (B, T, d_model), or its real tokens (N, d_model) with a `packing` -> (query terms or None, key terms)."""
        reader = cast(ReadsHidden, self.position)
        return reader.token_terms(x if packing is None else packing.unpack(x), self.layer)

    def score_mod(self, heads: Heads) -> ScoreMod | None:
        """The terms' bias in FlexAttention's form."""
        reader = cast(ReadsHidden, self.position)
        q_index = self._query_index(heads, 0, heads.q.shape[2])
        return reader.terms_score_mod(heads.q_terms, heads.k_terms, q_index, self.layer)

    def bias_rows(self, heads: Heads, start: int, end: int, keys: int) -> Tensor:
        """The bias of queries [start, end) over the first `keys` keys, from the terms and the queries and keys
        themselves (an encoding that transforms the score reads them: PaTH)."""
        reader = cast(ReadsHidden, self.position)
        q_rows = None if heads.q_terms is None else heads.q_terms[:, :, start:end]
        q_index = self._query_index(heads, start, end)
        pair = (heads.q[:, :, start:end], heads.k[:, :, :keys])
        return reader.terms_bias(q_rows, heads.k_terms[:, :, :keys], q_index, self.layer, *pair, shared=heads.shared)

    @staticmethod
    def _query_index(heads: Heads, start: int, end: int) -> Tensor:
        """The indices among the keys (the cached first) of queries [start, end): (end - start,)."""
        offset = heads.k.shape[2] - heads.q.shape[2]
        return torch.arange(offset + start, offset + end, device=heads.k.device)


class OwnWeightsAttention(SoftmaxAttention):
    """The encoding's own weights of the keys instead of softmax (`ReplacesSoftmax`: stick-breaking), one block of
    queries at a time (`ops.weighted_attention`)."""

    def __call__(
        self, attention: Attention, heads: Heads, mask: AttentionMask, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        q, k, v = heads.q, heads.k, heads.v
        batch, n_heads, length = q.shape[:3]
        rows = bias_block_rows(batch, n_heads, length, k.shape[-2], q.device)
        recompute = rows is not None  # blocks for memory: recomputed in the backward
        if mask.is_causal and q.device.type == "cpu" and length > causal_blocks.BLOCK_ROWS:  # blocks for speed
            rows = min(rows or length, causal_blocks.BLOCK_ROWS)
        weigh = partial(cast(ReplacesSoftmax, self.position).key_weights, layer=self.layer)
        dropout = attention.dropout if attention.training else 0.0
        return weighted_attention(q, k, v, mask, attention.scale, weigh, rows, need_weights, dropout, recompute)


STRATEGIES: dict[AttentionKind, type[SoftmaxAttention]] = {
    AttentionKind.SOFTMAX: SoftmaxAttention,
    AttentionKind.HIDDEN_TERMS: HiddenTermsAttention,
    AttentionKind.OWN_WEIGHTS: OwnWeightsAttention,
}


def strategy_for(position: PositionEncoding, layer: int) -> SoftmaxAttention:
    """The strategy of the attention `position` declares (`PositionEncoding.attention`), at layer index `layer`."""
    return STRATEGIES[position.attention](position, layer)
