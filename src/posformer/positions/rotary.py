"""Rotary position embedding (RoPE, Su et al. 2021): q and k rotated by position-dependent angles.

Two layouts of the rotated pairs:
  "interleaved": dims (2i, 2i+1) form a pair, Meta LLaMA's complex form
                 (`precompute_freqs_cis` / `apply_rotary_emb`).
  "half":        dims (i, i + d/2) form a pair, Hugging Face `rotate_half`.
Only the first `rotary_fraction * head_dim` dims are rotated (GPT-NeoX partial rotary).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.positions.base import PositionEncoding, frequencies
from posformer.positions.registry import register

ROPE_LAYOUTS = ("half", "interleaved")


def rope_inv_freq(dim: int, base: float = 10000.0) -> Tensor:
    """Inverse frequencies theta_i = base^(-2i/dim), i in [0, dim/2): (dim/2,) float32."""
    if dim % 2:
        raise ValueError(f"rope_inv_freq: rotary dim={dim} must be even")
    return frequencies(dim, base)


def rotary_dim(head_dim: int, fraction: float) -> int:
    return int(head_dim * fraction)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Rotate the first 2*cos.shape[-1] dims of x.

    x: (B, H, T, dh); cos, sin: (B, 1, T, r/2) with r the rotary dim -> (B, H, T, dh).
    """
    r = 2 * cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    if layout == "interleaved":
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    else:
        x1, x2 = rot[..., : r // 2], rot[..., r // 2 :]
        rotated = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return torch.cat((rotated, rest), dim=-1) if rest.shape[-1] else rotated


@register("rope")
class Rotary(PositionEncoding):
    """RoPE: score(q at m, k at n) depends on m - n only. Parameter-free; any length."""

    defaults = {"theta": 10000.0, "layout": "half", "rotary_fraction": 1.0}

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        p = {**cls.defaults, **cfg.position_params}
        if p["layout"] not in ROPE_LAYOUTS:
            raise cls.param_error(cls.name, "layout", p["layout"], f"one of {ROPE_LAYOUTS}")
        if not isinstance(p["theta"], (int, float)) or p["theta"] <= 1:
            raise cls.param_error(cls.name, "theta", p["theta"], "a number > 1")
        fraction = p["rotary_fraction"]
        if not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise cls.param_error(cls.name, "rotary_fraction", fraction, "a number in (0, 1]")
        dim = rotary_dim(cfg.head_dim, fraction)
        if dim == 0 or dim % 2:
            raise cls.param_error(
                cls.name, "rotary_fraction", fraction,
                f"a fraction giving an even, non-zero rotary dimension (head_dim={cfg.head_dim} "
                f"* {fraction} = {cfg.head_dim * fraction:g})",
            )

    def __init__(self, cfg, causal: bool, n_layers: int) -> None:
        super().__init__(cfg, causal, n_layers)
        dim = rotary_dim(cfg.head_dim, float(self.params["rotary_fraction"]))
        self.register_buffer("inv_freq", rope_inv_freq(dim, float(self.params["theta"])), persistent=False)
        self._memo: tuple[Tensor, Tensor, Tensor] | None = None

    def cos_sin(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """pos: (B, T) -> cos, sin: (B, 1, T, r/2) float32, memoised for the positions of one forward."""
        if self._memo is not None and self._memo[0] is pos:
            return self._memo[1], self._memo[2]
        angles = pos[:, None, :, None].to(torch.float32) * self.inv_freq
        cos, sin = angles.cos(), angles.sin()
        self._memo = (pos, cos, sin)
        return cos, sin

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        layout = self.params["layout"]
        cos, sin = self.cos_sin(q_pos)
        q = apply_rotary(q, cos.to(q.dtype), sin.to(q.dtype), layout)
        if k_pos is not q_pos:
            cos, sin = self.cos_sin(k_pos)
        k = apply_rotary(k, cos.to(k.dtype), sin.to(k.dtype), layout)
        return q, k
