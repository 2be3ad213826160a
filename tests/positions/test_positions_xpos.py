"""xPos against its references: scores equal to torchscale's `XPOS`, RoPE times a relative decay, and
its parameters' checks. Its defining properties with RoPE's: test_positions_rope.py."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from tests.conftest import tiny
from tests.positions.test_positions_rope import encoding, score


# ---------------------------------------------------------------------------------------- xPos
def torchscale_xpos(x: torch.Tensor, downscale: bool, scale_base: float = 512.0) -> torch.Tensor:
    """torchscale `XPOS.forward(x, offset=0, downscale)` for x (N, T, d): positions centred on T // 2."""
    length, dim = x.shape[1], x.shape[2]
    zeta = (torch.arange(0, dim, 2) + 0.4 * dim) / (1.4 * dim)
    min_pos = -length // 2
    scale = zeta ** torch.arange(min_pos, length + min_pos).to(zeta).div(scale_base)[:, None]
    half = scale.shape[1]
    angles = torch.arange(length, dtype=torch.float)[:, None] * (1.0 / (10000 ** (torch.arange(0, half) / half)))
    sin, cos = angles.sin(), angles.cos()
    if downscale:
        scale = 1 / scale
    sin, cos = ((t * scale).repeat_interleave(2, dim=-1) for t in (sin, cos))
    rotated_two = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    return x * cos + rotated_two * sin


@pytest.mark.parametrize("scale_base", [512.0, 8.0])
def test_xpos_scores_match_the_torchscale_reference(scale_base: float) -> None:
    """Same scores as the reference; its centring cancels in q.k, so only the scores are comparable."""
    enc = encoding("xpos", d_head=16, scale_base=scale_base)
    q, k = torch.randn(1, 2, 11, 16), torch.randn(1, 2, 11, 16)
    pos = torch.arange(11)[None]
    q_rot, k_rot = enc.rotate(q, k, pos, pos, 0)
    ref_q, ref_k = torchscale_xpos(q[0], False, scale_base), torchscale_xpos(k[0], True, scale_base)
    torch.testing.assert_close(
        q_rot[0] @ k_rot[0].transpose(-1, -2), ref_q @ ref_k.transpose(-1, -2), rtol=1e-5, atol=1e-5
    )


def test_xpos_is_rope_times_a_relative_decay() -> None:
    """score_xpos(m, n) for a single pair i is score_rope(m, n) * zeta_i^((m - n) / scale_base)."""
    xpos, rope = encoding("xpos", d_head=8).double(), encoding(layout="interleaved", d_head=8).double()
    zeta = (torch.arange(0, 8, 2, dtype=torch.float64) + 3.2) / 11.2
    for i in range(4):
        q, k = torch.zeros(1, 1, 1, 8, dtype=torch.float64), torch.zeros(1, 1, 1, 8, dtype=torch.float64)
        q[..., 2 * i : 2 * i + 2], k[..., 2 * i : 2 * i + 2] = torch.randn(2, dtype=torch.float64), torch.randn(2)
        for m, n in [(10, 3), (700, 0), (5, 5), (2, 9)]:
            expected = score(rope, q, k, m, n) * zeta[i] ** ((m - n) / 512)
            torch.testing.assert_close(score(xpos, q, k, m, n), expected)


def test_xpos_params_are_validated() -> None:
    with pytest.raises(ValueError, match="scale_base"):
        tiny("decoder", position="xpos", position_params={"scale_base": 0})
    with pytest.raises(ValueError, match="scaling"):
        tiny("decoder", position="xpos", position_params={"scaling": None})
    assert pf.positions.get("xpos").defaults["scale_base"] == 512.0
    assert "xpos" in pf.positions.names()
