"""ReRoPE (Su 2023, "Rectified Rotary Position Embeddings", github bojone/rerope): RoPE whose distance stops
growing at a window w.

    distance(i, j) = i - j   when i - j < w
                     w       otherwise (the query rotated at w, the key not at all: `rerope_patch.py`)

Every distance a model reads stays below w + 1, at any length. The reference patch also multiplies each query by
max(1, ln(i + 1) / ln(L)) ("log-n"); that is a separate trick and is not part of this encoding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from posformer.positions.params import PositionParams
from posformer.positions.piecewise import PiecewiseRotary, Regime, Remap, distances
from posformer.positions.registry import register


@register("rerope")
class ReRoPE(PiecewiseRotary):
    """RoPE with its distance clipped at `window` (default 512, the reference patch's). Any length."""

    defaults = {**PiecewiseRotary.ROPE_DEFAULTS, "window": 512}

    @classmethod
    def check_method(cls, params: Mapping[str, Any]) -> None:
        cls.require_int(params, "window", 1, expected="an integer >= 1 (the distance past which it stays w)")

    @classmethod
    def for_lengths(cls, params: Mapping[str, Any], target_len: int, trained_len: int) -> PositionParams:
        """w = trained_len / 4: the README's ReRoPE-w1024 on a Llama 2 of 4096 (any target_len)."""
        return cls.resolve_params({**params, "window": max(1, trained_len // 4)})

    def remap(self, q_pos: Tensor, k_pos: Tensor) -> Remap:
        window = self.params["window"]
        far = distances(q_pos, k_pos) >= window
        return Remap(torch.zeros_like(k_pos), [Regime(far, torch.full_like(q_pos, window))])
