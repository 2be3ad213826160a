"""Self-Extend (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning", github
datamllab/LongLM): exact distances within a neighbour window W, grouped ones beyond it.

    distance(i, j) = i - j                                    when i - j < W
                     floor(i / G) - floor(j / G) + W - floor(W / G)   otherwise

The grouped query sits at floor(i / G) + W - floor(W / G) and the key at floor(j / G), so that at i - j = W the
grouped distance is W or W + 1: the regimes join. The shift is the reference's decoding form
(`self_extend_patch/Llama.py`: `_re_group_size_2 - _re_group_size_2 // group_size_1`); its full pass writes
W - W / G, the same when G divides W. G = 1 is RoPE.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from posformer.positions.params import PositionParams
from posformer.positions.piecewise import PiecewiseRotary, Regime, Remap, distances
from posformer.positions.registry import register


@register("self_extend")
class SelfExtend(PiecewiseRotary):
    """RoPE with grouped positions past `neighbor_window` (default 1024), `group_size` (default 8) positions to a
    group: the reference's defaults. Any length."""

    defaults = {**PiecewiseRotary.ROPE_DEFAULTS, "group_size": 8, "neighbor_window": 1024}

    @classmethod
    def check_method(cls, params: Mapping[str, Any]) -> None:
        cls.require_int(params, "group_size", 1, expected="an integer >= 1 (G, positions to a group)")
        cls.require_int(params, "neighbor_window", 1, expected="an integer >= 1 (W, the distances kept exact)")

    @classmethod
    def for_lengths(cls, params: Mapping[str, Any], target_len: int, trained_len: int) -> PositionParams:
        """W = trained_len / 4 (the reference's 1024 for Llama 2's 4096) and the smallest G that keeps every
        distance below trained_len / 2: W + (target_len - W) / G < trained_len / 2, the README's empirical rule
        ((1/2 to 2/3) L > W + (N - W) / G) at its cautious end."""
        window = max(1, trained_len // 4)
        room = max(1, trained_len // 2 - window)
        group = max(1, (target_len - window) // room + 1)
        return cls.resolve_params({**params, "group_size": group, "neighbor_window": window})

    def remap(self, q_pos: Tensor, k_pos: Tensor) -> Remap:
        group, window = self.params["group_size"], self.params["neighbor_window"]
        grouped = distances(q_pos, k_pos) >= window
        q_at = q_pos.div(group, rounding_mode="floor") + (window - window // group)
        return Remap(k_pos.div(group, rounding_mode="floor"), [Regime(grouped, q_at)])
