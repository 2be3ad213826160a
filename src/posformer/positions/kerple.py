"""KERPLE, logarithmic variant (Chi et al. 2022, "KERPLE: Kernelized Relative Positional
Embedding for Length Extrapolation", NeurIPS 2022).

A conditionally positive definite kernel of the distance, with two learned
positive numbers per head and per layer:

    logits[b, h, i, j] = scale * q_i . k_j - r1[layer, h] * log(1 + r2[layer, h] * |m - n|)

with m = q_pos[b, i], n = k_pos[b, j]. Like ALiBi the bias is not multiplied
by the attention scale and works for any length.

Positivity: r = eps + softplus(raw) with eps = 1e-2, the floor that the
paper's code enforces by clamping; unlike a clamp, softplus keeps a gradient
everywhere, so a kernel pushed to the floor can recover. Initialisation follows
the paper's code: r1 ~ U(0, 2) and r2 ~ U(0, 1) (kept above the floor).
One (r1, r2) pair per head in every layer, as in the paper.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer.positions.contract import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes

EPS = 1e-2


def _inverse_softplus(y: Tensor) -> Tensor:
    return y + torch.log(-torch.expm1(-y))


@register("kerple")
class KerpleLog(PositionEncoding):
    """-r1 * log(1 + r2 * |m - n|) with r1, r2 > 0 learned per layer and head. No position_params."""

    adds_bias = True
    flex_form = "distance_table"

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        shape = (n_layers, sizes.n_heads)
        r1 = (torch.rand(shape) * 2.0).clamp(min=2 * EPS)
        r2 = torch.rand(shape).clamp(min=2 * EPS)
        self.r1_raw = nn.Parameter(_inverse_softplus(r1 - EPS))
        self.r2_raw = nn.Parameter(_inverse_softplus(r2 - EPS))

    def kernel(self) -> tuple[Tensor, Tensor]:
        """The effective r1, r2: each (n_layers, n_heads), every entry >= 1e-2."""
        return EPS + F.softplus(self.r1_raw), EPS + F.softplus(self.r2_raw)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """-> -r1 * log(1 + r2 * |q_pos - k_pos|): (B or 1, H, Tq, Tk) float32; the distances are computed
        once per forward."""
        r1, r2 = self.kernel()
        r1, r2 = r1[layer][None, :, None, None], r2[layer][None, :, None, None]
        distance = self.per_forward(
            "distance",
            q_pos,
            k_pos,
            lambda q_rows, k_rows: (q_rows[:, None, :, None] - k_rows[:, None, None, :]).abs().to(torch.float32),
        )
        return -r1 * torch.log1p(r2 * distance)

    def distance_bias(self, rel: Tensor, layer: int = 0) -> Tensor:
        """rel: (R,) = key_pos - query_pos -> -r1 * log(1 + r2 * |rel|) of `layer`: (H, R)."""
        r1, r2 = (value[layer][:, None] for value in self.kernel())
        return -r1 * torch.log1p(r2 * rel.abs().to(torch.float32)[None, :])
