"""ALiBi, attention with linear biases (Press et al. 2022, "Train Short, Test Long: Attention
with Linear Biases Enables Input Length Extrapolation").

No position embedding at all; each head h penalises its logits linearly in the
distance between query and key:

    logits[b, h, i, j] = scale * q_i . k_j - m_h * |q_pos[b, i] - k_pos[b, j]|

The bias is not multiplied by the attention scale. In a causal stack only
k_pos <= q_pos is attended, where |i - j| = i - j (the paper's form); an encoder
stack gets the symmetric form. The slopes m_h are fixed (`alibi_slopes`); the
encoding has no parameters and works for any length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from posformer.positions.contract import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]


def alibi_slopes(n_heads: int) -> Tensor:
    """The head slopes m_1 .. m_n: (n_heads,) float32.

    For n a power of two: the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8).
    Otherwise, with c the largest power of two below n: the c slopes of c heads,
    then every other slope of the 2c sequence (slopes_2c[0::2]) for the other
    n - c heads (the rule of the paper's code and of BLOOM).
    """
    if not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"alibi_slopes: n_heads={n_heads!r} must be a positive integer")
    c = 2 ** math.floor(math.log2(n_heads))
    slopes = _power_of_two_slopes(c)
    if c != n_heads:
        slopes += _power_of_two_slopes(2 * c)[0::2][: n_heads - c]
    return torch.tensor(slopes, dtype=torch.float32)


@register("alibi")
class ALiBi(PositionEncoding):
    """Fixed per-head linear distance penalty -m_h * |i - j|. No parameters; any length."""

    adds_bias = True
    flex_form = "distance_table"
    slopes: Tensor  # (n_heads,) buffer

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.register_buffer("slopes", alibi_slopes(sizes.n_heads), persistent=False)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """-> -m_h * |q_pos - k_pos|: (B or 1, H, Tq, Tk) float32, computed once per forward for every layer."""
        return self.per_forward("bias", q_pos, k_pos, self._bias)

    def _bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None, :, None] - k_pos[:, None, None, :]).abs().to(torch.float32)
        return -self.slopes[None, :, None, None] * distance

    def distance_bias(self, rel: Tensor, layer: int = 0) -> Tensor:
        """rel: (R,) = key_pos - query_pos -> -m_h * |rel|: (H, R)."""
        return -self.slopes[:, None] * rel.abs().to(torch.float32)[None, :]
