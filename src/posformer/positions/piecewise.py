"""RoPE whose distance for query i and key j is a piecewise function of (q_pos, k_pos): the base of the
training-free context-extension methods ReRoPE (`rerope`), Self-Extend (`self_extend`), dual chunk attention
(`dual_chunk`) and StreamingLLM (`streaming`).

Each is a trained `rope` model's RoPE, with its weights, parameters and frequencies, whose pairs a method splits
into regimes. In the plain one, query and key are rotated at their own positions: distance i - j, RoPE as trained.
In every other regime the query is rotated at a(i) and the key at b(j), so that the pair's distance is
a(i) - b(j) (ReRoPE beyond its window: a = w, b = 0). A method moves every key of its regimes to one b (`Remap`).
StreamingLLM also hides pairs: those keys are out of its cache.

Through the contract: `rotate` rotates q and k at their own positions, as `rope` does; that is what the KV cache
stores, so cached decoding and left padding work as they do for rope. `bias` adds, on each pair of a regime, the
regime's score less the plain one, scale * (q_a(i) . k_b(j) - q_i . k_j), 0 on a plain pair, and the dtype's most
negative value on a hidden pair. RoPE's score of a pair rotated at (a, b) is a plain q.k of rotated vectors, so a
regime costs one matmul. q and k arrive rotated at their positions p and are rotated on by a - p (b - p): a
rotation by a - p after one by p is one by a, to float32's precision in the angle at p, as RoPE's own at p.

Memory: the bias is asked for one block of queries at a time past a size (`modules.bias_blocks`), and what it
computes for a block is (B, H, rows, keys) and (B or 1, rows, keys) per regime: never a (T, T) tensor per head
at a length that needs blocks. FlexAttention cannot take it: a regime's score is a second q.k product.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from posformer.ops.grouped_heads import grouped_scores
from posformer.positions.contract import PositionEncoding
from posformer.positions.params import PositionParams
from posformer.positions.per_forward import batch_rows
from posformer.positions.rope_scaling import LENGTH_DEPENDENT
from posformer.positions.rotary import (
    ROPE_DEFAULTS,
    Rotary,
    apply_rotary,
    check_rope_params,
    rope_cos_sin,
    rope_frequencies,
)
from posformer.positions.sizes import Sizes


class Regime(NamedTuple):
    """The pairs (i, j) where `pairs` holds score a query rotated at q_at[i] against its key moved as `Remap` says;
    the regimes of a method are disjoint.

    pairs: bool, broadcastable to (B or 1, Tq, Tk); q_at: (B or 1, Tq) integer positions."""

    pairs: Tensor
    q_at: Tensor


class Remap(NamedTuple):
    """A method's regimes, and where they rotate the keys: k_at (B or 1, Tk) integer positions, or None for the
    keys' own positions."""

    k_at: Tensor | None
    regimes: list[Regime]


def distances(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """q_pos (B or 1, Tq), k_pos (B or 1, Tk) -> i - j: (B or 1, Tq, Tk)."""
    return q_pos[:, :, None] - k_pos[:, None, :]


class PiecewiseRotary(PositionEncoding):
    """RoPE with a per-method remapping of the (query, key) distance; see the module docstring.

    Parameters: those of `rope` (theta, layout, rotary_fraction, scaling, frequency_fraction; a scaling that
    depends on the length, dynamic or longrope, is refused) and the method's own. A subclass sets `defaults`
    to `ROPE_DEFAULTS` and its own, checks its own in `check_method`, gives its regimes in `remap`, any pairs it
    hides in `hidden`, and the paper's parameters for an extension in `for_lengths`.
    """

    adds_bias = True

    ROPE_DEFAULTS: ClassVar[dict[str, Any]] = dict(ROPE_DEFAULTS)
    causal_only = True  # every method is defined over the keys before each query
    flex_refusal = "its score of a remapped pair is a second q.k product, which no score_mod can form"

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        check_rope_params(cls, params, sizes.head_dim)
        scaling = params["scaling"]
        if scaling is not None and scaling["type"] in LENGTH_DEPENDENT:
            raise cls.param_error(
                cls.name,
                "scaling",
                scaling,
                "None or a scaling that does not depend on the length (not dynamic or longrope)",
            )
        cls.check_method(params)

    @classmethod
    def check_method(cls, params: Mapping[str, Any]) -> None:
        """Raise `ValueError` naming the parameter when the method's own parameters are out of range."""

    @classmethod
    def for_lengths(cls, params: Mapping[str, Any], target_len: int, trained_len: int) -> PositionParams:
        """A rope model's `params` with this method's parameters chosen, as its paper chooses them, to read
        target_len tokens after training at trained_len."""
        raise NotImplementedError

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.rotary_dim, _, inv_freq, self.attention_factor = rope_frequencies(sizes.head_dim, self.params)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def remap(self, q_pos: Tensor, k_pos: Tensor) -> Remap:
        """The regimes of queries at q_pos (B or 1, Tq) and keys at k_pos (B or 1, Tk)."""
        raise NotImplementedError

    def hidden(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The pairs no query sees, bool broadcastable to (B or 1, Tq, Tk), or None when it sees every key."""
        return None

    def tables(self, q_pos: Tensor, k_pos: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """((cos, sin) at q_pos, (cos, sin) at k_pos): (B or 1, 1, T, r/2), times the attention factor, as rope's;
        computed once per forward."""
        return self.per_forward("tables", q_pos, k_pos, self._tables)

    def _tables(self, q_pos: Tensor, k_pos: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        q_table = rope_cos_sin(q_pos, self.inv_freq, self.attention_factor)
        return q_table, q_table if k_pos is q_pos else rope_cos_sin(k_pos, self.inv_freq, self.attention_factor)

    rotate = Rotary.rotate  # RoPE at the positions themselves, with this class's tables

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """q (B, H, Tq, dh), k (B, Hkv, Tk, dh), rotated at q_pos (B, Tq) and k_pos (B, Tk) -> (B, H, Tq, Tk) float32
        (float64 for float64 q): scale * (regime score - plain score) on the pairs of a regime, 0 on the others,
        the most negative value of q's dtype on hidden pairs."""
        q_pos, k_pos = batch_rows(q_pos), batch_rows(k_pos)
        dtype = torch.promote_types(q.dtype, torch.float32)
        q_in, k_in = q.to(dtype), k.to(dtype)
        remap = self.remap(q_pos, k_pos)
        bias = q_in.new_zeros((*q.shape[:3], k.shape[2])) if not remap.regimes else None
        if remap.regimes:
            plain, moved_k = grouped_scores(q_in, k_in), self._moved(k_in, k_pos, remap.k_at)
        for regime in remap.regimes:  # disjoint: each pair's difference is written once, in place (3 blocks at most)
            scores = grouped_scores(self._moved(q_in, q_pos, regime.q_at), moved_k).sub_(plain)
            scores.masked_fill_(~regime.pairs[:, None], 0.0)
            bias = scores if bias is None else bias.add_(scores)
        bias.mul_(self.scale)
        hidden = self.hidden(q_pos, k_pos)
        return bias if hidden is None else bias.masked_fill_(hidden[:, None], torch.finfo(q.dtype).min)

    def _moved(self, x: Tensor, at: Tensor, to: Tensor | None) -> Tensor:
        """x (B, n, T, dh) rotated at positions `at` (B or 1, T) -> rotated at `to` (B or 1, T) instead (None: x)."""
        if to is None:
            return x
        cos, sin = rope_cos_sin(to - at, self.inv_freq)
        return apply_rotary(x, cos.to(x.dtype), sin.to(x.dtype), self.params["layout"])
