"""Sinusoidal encoding: the closed form of Vaswani et al. and its defining linear-shift property."""

from __future__ import annotations

import math

import pytest
import torch

import posformer as pf
from posformer.positions import sinusoidal_table


@pytest.mark.parametrize("base", [10000.0, 500.0, 1e6])
@pytest.mark.parametrize("dim", [8, 64])
def test_table_equals_the_closed_form(base: float, dim: int) -> None:
    table = sinusoidal_table(50, dim, base)
    for pos in (0, 1, 7, 49):
        for i in range(dim // 2):
            angle = pos / base ** (2 * i / dim)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_half_layout_puts_sines_then_cosines() -> None:
    interleaved = sinusoidal_table(20, 16, layout="interleaved")
    half = sinusoidal_table(20, 16, layout="half")
    torch.testing.assert_close(half[:, :8], interleaved[:, 0::2])
    torch.testing.assert_close(half[:, 8:], interleaved[:, 1::2])


@pytest.mark.parametrize("base", [10000.0, 100.0])
@pytest.mark.parametrize("shift", [1, 5, 33])
def test_a_shift_is_one_linear_map_for_every_position(base: float, shift: int) -> None:
    """PE(pos + k) = M_k PE(pos), M_k block-diagonal rotations by k * omega_i, independent of pos."""
    dim = 16
    table = sinusoidal_table(200, dim, base).double()
    omega = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    m = torch.zeros(dim, dim, dtype=torch.float64)
    for i, w in enumerate(omega.tolist()):
        c, s = math.cos(shift * w), math.sin(shift * w)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]])
    assert torch.allclose(m @ m.T, torch.eye(dim, dtype=torch.float64))  # a rotation: no pos inside
    torch.testing.assert_close(table[shift:], table[:-shift] @ m.T, atol=1e-5, rtol=0)


def test_embed_hook_adds_the_table_at_the_given_positions() -> None:
    cfg = pf.Config(
        arch="encoder",
        vocab_size=10,
        d_model=16,
        n_layers=1,
        n_heads=2,
        position="sinusoidal",
        position_params={"base": 500.0},
    )
    encoding = pf.positions.build(cfg, causal=False, n_layers=1)
    pos = torch.tensor([[3, 4, 9], [0, 0, 1]])
    x = torch.randn(2, 3, 16)
    angles = pos[..., None].double() / 500.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16)  # (2, 3, 8)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).float()  # sin, cos interleaved
    torch.testing.assert_close(encoding.embed(x, pos), x + table)
