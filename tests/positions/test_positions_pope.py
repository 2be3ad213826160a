"""PoPE (polar coordinate position embedding): scores against x-transformers 2.31.10's `PolarEmbedding` and
`apply_polar_pos_emb` on the same tensors and phases, the fused lift's gradient against the unfused formula's, and
the defining properties: the score depends on the distance only, and at equal positions with no phase bias it is
the product of the magnitudes alone."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from x_transformers.x_transformers import PolarEmbedding, apply_polar_pos_emb

import posformer as pf
from posformer.positions.polar import PolarLift
from tests.conftest import tiny


def _pope(**params) -> pf.positions.PositionEncoding:
    cfg = tiny("decoder", d_model=32, n_heads=4, position="pope", position_params=params)
    return pf.positions.build(cfg, causal=True, n_layers=1)


def test_scores_equal_x_transformers_polar_embedding() -> None:
    torch.manual_seed(0)
    reference = PolarEmbedding(8, 4)  # its bias_uniform_init writes into a leaf that needs a gradient: drawn here
    ours = _pope()
    with torch.no_grad():
        reference.learned_bias.uniform_(-2 * math.pi - 1, 1)  # past both ends of the clamp too
        ours.learned_bias.copy_(reference.learned_bias[:, 0])
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    pos = torch.arange(3, 9)
    freqs, bias = reference(pos)
    theirs = apply_polar_pos_emb(q, freqs) @ apply_polar_pos_emb(k, freqs + bias).transpose(-1, -2)
    q_lift, k_lift = ours.rotate(q, k, pos.expand(2, 6), pos.expand(2, 6), 0)
    torch.testing.assert_close(q_lift @ k_lift.transpose(-1, -2), theirs)


def _unfused(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    mu = F.softplus(x)
    return torch.cat((mu * angles.cos(), mu * angles.sin()), dim=-1)


def test_the_fused_lift_has_the_gradients_of_the_unfused_formula() -> None:
    torch.manual_seed(1)
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    bias = (-torch.rand(3, 8, dtype=torch.float64) * 6).requires_grad_()
    phi = torch.randn(2, 1, 5, 8, dtype=torch.float64)
    grad = torch.randn(2, 3, 5, 16, dtype=torch.float64)
    fused = PolarLift.apply(x, phi.cos(), phi.sin(), bias)
    unfused = _unfused(x, phi - bias[:, None])
    torch.testing.assert_close(fused, unfused)
    ours = torch.autograd.grad(fused, (x, bias), grad)
    reference = torch.autograd.grad(unfused, (x, bias), grad)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a, b)


def test_the_score_depends_on_the_distance_only() -> None:
    torch.manual_seed(2)
    pope = _pope(bias_uniform_init=True).double()
    q, k = torch.randn(1, 4, 1, 8, dtype=torch.float64), torch.randn(1, 4, 1, 8, dtype=torch.float64)
    scores = []
    for shift in (0, 13, 5000):
        q_lift, k_lift = pope.rotate(q, k, torch.tensor([[7 + shift]]), torch.tensor([[2 + shift]]), 0)
        scores.append((q_lift * k_lift).sum(-1))
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(3, -1, -1, -1))


def test_at_equal_positions_without_phase_bias_the_score_is_the_magnitudes_product() -> None:
    """The phases cancel: sum_j softplus(q_j) softplus(k_j), whatever the position."""
    q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8)
    pos = torch.tensor([[0, 50, 900]])
    q_lift, k_lift = _pope().rotate(q, k, pos, pos, 0)
    torch.testing.assert_close((q_lift * k_lift).sum(-1), (F.softplus(q) * F.softplus(k)).sum(-1))


def test_the_phase_bias_is_clamped_to_minus_two_pi_and_zero() -> None:
    pope = _pope()
    with torch.no_grad():
        pope.learned_bias.fill_(3.0)  # outside: as if 0
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)
    pos = torch.tensor([[4, 9]])
    clamped, _ = pope.rotate(q, k, pos, pos, 0)
    with torch.no_grad():
        pope.learned_bias.zero_()
    torch.testing.assert_close(clamped, pope.rotate(q, k, pos, pos, 0)[0])
    assert math.isclose(float(pope.learned_bias.sum()), 0.0)
