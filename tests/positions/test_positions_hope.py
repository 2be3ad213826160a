"""HoPE and transformers 5.x's "proportional" RoPE: RoPE whose lowest frequencies do not rotate.

HoPE (Chen et al., ACL 2025): the pairs whose wavelength exceeds the training length pass unrotated at every
position, the others rotate as RoPE's. Proportional RoPE (Gemma's configs in transformers 5.x) is p-RoPE; its
frequencies are checked against the formula of transformers 5.x's `_compute_proportional_rope_parameters`,
written out here: base^(-2i/head_dim) for i < floor(p * head_dim / 2), then zeros, all divided by `factor`.
"""

from __future__ import annotations

import math

import pytest
import torch

import posformer as pf
from posformer.hf.rope import rope_params
from tests.conftest import tiny


def _build(position: str, d_head: int = 32, **params) -> pf.positions.PositionEncoding:
    cfg = tiny("decoder", d_model=2 * d_head, n_heads=2, position=position, position_params=params)
    return pf.positions.build(cfg, causal=True, n_layers=1)


@pytest.mark.parametrize("theta, trained_length", [(10000.0, 64), (10000.0, 2048), (500.0, 16)])
def test_hope_rotates_exactly_the_pairs_that_turn_a_whole_period(theta: float, trained_length: int) -> None:
    """Pair i rotates when its wavelength 2*pi * theta^(2i/r) is at most L: those pairs come out as RoPE's,
    every other pair exactly as it went in, at every position."""
    hope = _build("hope", theta=theta, trained_length=trained_length)
    rope = _build("rope", theta=theta)
    turning = [i for i in range(16) if 2 * math.pi * theta ** (2 * i / 32) <= trained_length]
    still = [i for i in range(16) if i not in turning]
    q = torch.randn(2, 2, 7, 32)
    pos = torch.tensor([[0, 1, 5, 63, 64, 1000, 40000]] * 2)
    ours, _ = hope.rotate(q, q, pos, pos, 0)
    reference, _ = rope.rotate(q, q, pos, pos, 0)
    dims = lambda pairs: pairs + [i + 16 for i in pairs]  # noqa: E731  "half" layout: pair i is (i, i + 16)
    assert torch.equal(ours[..., dims(still)], q[..., dims(still)])
    torch.testing.assert_close(ours[..., dims(turning)], reference[..., dims(turning)])


def test_hope_score_depends_on_the_distance_only() -> None:
    """In float64, so that the angles at large positions keep their precision."""
    hope = _build("hope", trained_length=64).double()
    q, k = torch.randn(1, 2, 1, 32, dtype=torch.float64), torch.randn(1, 2, 1, 32, dtype=torch.float64)
    scores = []
    for shift in (0, 17, 3000):
        q_rot, k_rot = hope.rotate(q, k, torch.tensor([[9 + shift]]), torch.tensor([[2 + shift]]), 0)
        scores.append((q_rot * k_rot).sum())
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(3))


def test_hope_training_length_must_be_a_positive_integer() -> None:
    with pytest.raises(ValueError, match=r"trained_length.*0.*an integer > 0"):
        _build("hope", trained_length=0)


@pytest.mark.parametrize("head_dim, p, factor", [(32, 0.25, 1.0), (16, 0.35, 1.0), (32, 0.5, 8.0)])
def test_proportional_rope_is_p_rope_with_the_hf_frequencies(head_dim: int, p: float, factor: float) -> None:
    rope = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": p, "factor": factor}
    hf = {"model_type": "gemma", "max_position_embeddings": 4096, "rope_parameters": rope}
    params = rope_params(hf)
    rotating = int(p * head_dim // 2)
    expected = [1e6 ** (-2 * i / head_dim) if i < rotating else 0.0 for i in range(head_dim // 2)]
    ours = _build("rope", d_head=head_dim, **params).inv_freq
    torch.testing.assert_close(ours, torch.tensor(expected) / factor)
