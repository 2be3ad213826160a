"""PoPE, polar coordinate position embedding (Gopalakrishnan et al. 2025, arXiv:2509.10534): what a key matches
(its magnitudes) and where it is (its phases) kept apart.

Each of the dh features of a query or key becomes a magnitude mu = softplus(x) at a phase that depends on the
position alone, phi_j = m * theta^(-j/dh) (one frequency per feature, not per pair), and the score is

    sum_j mu_q,j * mu_k,j * cos((m - n) * theta^(-j/dh) - b_h,j),

with b a learned phase per head and feature, clamped to [-2*pi, 0] (x-transformers' `PolarEmbedding`, whose
`learned_bias` the stack's encoding shares across its layers as there). A kernel takes the score as the dot product
of q' = [mu_q cos(phi_q - b), mu_q sin(phi_q - b)] and k' = [mu_k cos phi_k, mu_k sin phi_k]: q and k leave the hook
2 * dh wide, and the values stay dh. x-transformers adds b to the key's phase; here it goes on the query's, which
gives the same score and leaves the keys, and the KV cache, free of any learned term.

`PolarLift` is the lift as one autograd node: it saves the dh-wide input, not the 2 * dh-wide output, and recomputes
the phases in its backward (the unfused form keeps the softplus, both halves and a per-head phase table).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable

from posformer.positions.contract import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes


def _phases(cos: Tensor, sin: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
    """cos and sin of phi - b: tables (B or 1, 1, T, dh) and b (H, dh) or None -> (B or 1, H or 1, T, dh)."""
    if bias is None:
        return cos, sin
    cos_b, sin_b = bias.cos()[:, None], bias.sin()[:, None]  # (H, 1, dh)
    return cos * cos_b + sin * sin_b, sin * cos_b - cos * sin_b


class PolarLift(torch.autograd.Function):
    """x (B, H, T, dh) -> [softplus(x) cos(phi - b), softplus(x) sin(phi - b)] (B, H, T, 2 dh), computed in float32
    (or wider) and returned in x's dtype; cos, sin: the tables of phi (B or 1, 1, T, dh) float32 (or wider), no
    gradient; bias: b (H, dh) or None. The gradient reaches x and b."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, cos: Tensor, sin: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, cos, sin, bias)
        c, s = _phases(cos, sin, bias)
        mu = F.softplus(x.to(torch.promote_types(x.dtype, torch.float32)))
        return torch.cat((mu * c, mu * s), dim=-1).to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None, None, Tensor | None]:
        x, cos, sin, bias = ctx.saved_tensors
        c, s = _phases(cos, sin, bias)
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        g_cos, g_sin = grad.to(wide.dtype).chunk(2, dim=-1)
        grad_x = ((g_cos * c + g_sin * s) * torch.sigmoid(wide)).to(x.dtype)
        grad_bias = None
        if bias is not None and ctx.needs_input_grad[3]:  # d/db of (mu cos(phi - b), mu sin(phi - b))
            mu = F.softplus(wide)
            grad_bias = (mu * (g_cos * s - g_sin * c)).sum(dim=(0, 2))
        return grad_x, None, None, grad_bias


@register("pope")
class Polar(PositionEncoding):
    """PoPE (see the module docstring). Parameters: `theta` (default 10000), `bias_uniform_init` (default False:
    the phases b start at 0; True: uniform in [-2*pi, 0], x-transformers' `polar_bias_uniform_init`)."""

    defaults = {"theta": 10000.0, "bias_uniform_init": False}

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        theta = params["theta"]
        if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 1:
            raise cls.param_error(cls.name, "theta", theta, "a number > 1")
        if not isinstance(params["bias_uniform_init"], bool):
            raise cls.param_error(cls.name, "bias_uniform_init", params["bias_uniform_init"], "True or False")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        dim = sizes.head_dim
        inv_freq = float(self.params["theta"]) ** (-torch.arange(dim, dtype=torch.float32) / dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.learned_bias = nn.Parameter(torch.zeros(sizes.n_heads, dim))
        if self.params["bias_uniform_init"]:
            nn.init.uniform_(self.learned_bias, -2 * math.pi, 0.0)

    def tables(self, q_pos: Tensor, k_pos: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """((cos, sin) of phi at q_pos, at k_pos), each (B or 1, 1, T, dh) float32; once per forward."""
        return self.per_forward("tables", q_pos, k_pos, self._tables)

    def _tables(self, q_pos: Tensor, k_pos: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        def at(pos: Tensor) -> tuple[Tensor, Tensor]:
            angles = pos[:, None, :, None].to(self.inv_freq.dtype) * self.inv_freq
            return angles.cos(), angles.sin()

        q_table = at(q_pos)
        return q_table, q_table if k_pos is q_pos else at(k_pos)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """q (B, H, Tq, dh), k (B, Hkv, Tk, dh) -> q' (B, H, Tq, 2 dh), k' (B, Hkv, Tk, 2 dh)."""
        (cos_q, sin_q), (cos_k, sin_k) = self.tables(q_pos, k_pos)
        bias = self.learned_bias.float().clamp(-2 * math.pi, 0.0)
        return PolarLift.apply(q, cos_q, sin_q, bias), PolarLift.apply(k, cos_k, sin_k, None)
