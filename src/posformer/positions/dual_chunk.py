"""Dual chunk attention (An et al. 2024, "Training-Free Long-Context Scaling of Large Language Models", github
HKUNLP/ChunkLlama; Qwen2.5-1M's `dual_chunk_attention_config`): positions counted within chunks.

With c = chunk_size - local_size, the chunk of position p is floor(p / c), every key sits at j mod c, and the
query at (`chunkllama_attn_replace.py`, `ChunkLlamaRotaryEmbedding`):

    intra-chunk       (same chunk)            i mod c                          distance i - j: RoPE
    successive-chunk  (the previous chunk)    min(i mod c + c, chunk_size)
    inter-chunk       (any earlier chunk)     min(2c - 1, chunk_size)

so no distance exceeds chunk_size. With chunk_size >= the length and local_size < chunk_size / 2 it is RoPE.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from posformer.positions.params import PositionParams
from posformer.positions.piecewise import PiecewiseRotary, Regime, Remap
from posformer.positions.registry import register


@register("dual_chunk")
class DualChunk(PiecewiseRotary):
    """RoPE over chunks of chunk_size - local_size positions (defaults 3072 and 512: ChunkLlama's for Llama 2's
    4096). Any length."""

    defaults = {**PiecewiseRotary.ROPE_DEFAULTS, "chunk_size": 3072, "local_size": 512}

    @classmethod
    def check_method(cls, params: Mapping[str, Any]) -> None:
        size = cls.require_int(params, "chunk_size", 2, expected="an integer >= 2")
        cls.require_int(params, "local_size", 0, size, f"an integer in [0, chunk_size={size})")

    @classmethod
    def for_lengths(cls, params: Mapping[str, Any], target_len: int, trained_len: int) -> PositionParams:
        """chunk_size = 3 trained_len / 4 and local_size = trained_len / 8, ChunkLlama's `replace_with_chunkllama`
        (any target_len)."""
        return cls.resolve_params(
            {**params, "chunk_size": max(2, 3 * trained_len // 4), "local_size": trained_len // 8}
        )

    def remap(self, q_pos: Tensor, k_pos: Tensor) -> Remap:
        size = self.params["chunk_size"]
        chunk = size - self.params["local_size"]
        gap = q_pos.div(chunk, rounding_mode="floor")[:, :, None] - k_pos.div(chunk, rounding_mode="floor")[:, None]
        successive = (q_pos.remainder(chunk) + chunk).clamp(max=size)
        inter = torch.full_like(q_pos, min(2 * chunk - 1, size))
        return Remap(k_pos.remainder(chunk), [Regime(gap == 1, successive), Regime(gap >= 2, inter)])
