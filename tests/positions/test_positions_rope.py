"""RoPE and xPos: the defining properties of the rotation (relative property, rotation matrix and its
gradient, layouts, norm, YaRN's attention factor, partial rotary) and p-RoPE. Oracles: explicit rotation
matrices. xPos against torchscale: test_positions_xpos.py; KV-cached decoding and dynamic NTK:
test_positions_rope_decoding.py; the cos/sin tables: test_positions_rope_tables.py; scalings against
Hugging Face: test_positions_rope_scaling.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import posformer as pf
from tests.conftest import tiny

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
LAYOUTS = ["half", "interleaved"]
STATIC_SCALINGS = [  # scalings whose frequencies do not depend on the length
    None,
    {"type": "linear", "factor": 4.0},
    {"type": "ntk", "factor": 4.0},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    {
        "type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
]


# --------------------------------------------------------------------------- the defining properties
def encoding(position: str = "rope", d_head: int = 8, **params):
    cfg = tiny("decoder", d_model=2 * d_head, n_heads=2, position=position, position_params=params)
    return pf.positions.build(cfg, causal=True, n_layers=1)


def score(enc, q: torch.Tensor, k: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """q.k after rotating q (B, H, 1, dh) at position m and k at position n: (B, H)."""
    batch = q.shape[0]
    q_rot, k_rot = enc.rotate(q, k, torch.full((batch, 1), m), torch.full((batch, 1), n), 0)
    return (q_rot * k_rot).sum(-1)[..., 0]


@settings(max_examples=60, **SETTINGS)
@given(
    layout=st.sampled_from(LAYOUTS),
    scaling=st.sampled_from(STATIC_SCALINGS),
    fraction=st.sampled_from([0.5, 1.0]),
    m=st.integers(0, 4000),
    n=st.integers(0, 4000),
    shift=st.integers(0, 20000),
    seed=st.integers(0, 2**16),
)
def test_rope_score_depends_on_the_offset_only(layout, scaling, fraction, m, n, shift, seed) -> None:
    """score(q at m, k at n) == score(q at m+s, k at n+s), in float64 (the tables follow the buffers)."""
    enc = encoding(layout=layout, scaling=scaling, rotary_fraction=fraction).double()
    g = torch.Generator().manual_seed(seed)
    q, k = (
        torch.randn(2, 2, 1, 8, generator=g, dtype=torch.float64),
        torch.randn(2, 2, 1, 8, generator=g, dtype=torch.float64),
    )
    torch.testing.assert_close(score(enc, q, k, m + shift, n + shift), score(enc, q, k, m, n), rtol=1e-8, atol=1e-8)


@settings(max_examples=25, **SETTINGS)
@given(
    layout=st.sampled_from(LAYOUTS),
    m=st.integers(0, 300),
    n=st.integers(0, 300),
    shift=st.integers(0, 300),
    seed=st.integers(0, 2**16),
)
def test_rope_score_depends_on_the_offset_only_in_float32(layout, m, n, shift, seed) -> None:
    enc = encoding(layout=layout)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 2, 1, 8, generator=g), torch.randn(1, 2, 1, 8, generator=g)
    torch.testing.assert_close(score(enc, q, k, m + shift, n + shift), score(enc, q, k, m, n), rtol=1e-3, atol=1e-3)


@settings(max_examples=40, **SETTINGS)
@given(
    layout=st.sampled_from(LAYOUTS),
    m=st.integers(0, 3000),
    n=st.integers(0, 3000),
    shift=st.integers(0, 10000),
    seed=st.integers(0, 2**16),
)
def test_xpos_score_depends_on_the_offset_only(layout, m, n, shift, seed) -> None:
    enc = encoding("xpos", layout=layout).double()
    g = torch.Generator().manual_seed(seed)
    q, k = (
        torch.randn(1, 2, 1, 8, generator=g, dtype=torch.float64),
        torch.randn(1, 2, 1, 8, generator=g, dtype=torch.float64),
    )
    torch.testing.assert_close(score(enc, q, k, m + shift, n + shift), score(enc, q, k, m, n), rtol=1e-8, atol=1e-12)


def rotation_matrix(inv_freq: torch.Tensor, position: int, layout: str, d_head: int) -> torch.Tensor:
    """The block-diagonal R(theta, m) (d_head, d_head): [[cos, -sin], [sin, cos]] on each pair, identity after."""
    r = 2 * inv_freq.numel()
    matrix = torch.eye(d_head, dtype=torch.float64)
    for i, theta in enumerate(inv_freq.double().tolist()):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
        c, s = math.cos(position * theta), math.sin(position * theta)
        matrix[a, a], matrix[a, b], matrix[b, a], matrix[b, b] = c, -s, s, c
    return matrix


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fraction", [0.5, 1.0])
def test_efficient_form_equals_the_rotation_matrix(layout: str, fraction: float) -> None:
    enc = encoding(d_head=8, layout=layout, rotary_fraction=fraction).double()
    positions = [0, 1, 5, 77, 1000]
    q = torch.randn(1, 2, len(positions), 8, dtype=torch.float64)
    rotated, _ = enc.rotate(q, q, torch.tensor([positions]), torch.tensor([positions]), 0)
    for t, m in enumerate(positions):
        matrix = rotation_matrix(enc.inv_freq, m, layout, 8)
        torch.testing.assert_close(rotated[0, :, t], q[0, :, t] @ matrix.T)
        # and R(m)^T R(n) = R(n - m): the relative property in matrix form
        torch.testing.assert_close(
            matrix.T @ rotation_matrix(enc.inv_freq, m + 9, layout, 8), rotation_matrix(enc.inv_freq, 9, layout, 8)
        )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fraction", [0.5, 1.0])
def test_gradient_is_the_transposed_rotation_matrix(layout: str, fraction: float) -> None:
    """d(R x)/dx = R, so the gradient of x is grad @ R: the hand-written backward against the explicit matrix,
    for q laid out (B, T, H, dh) and transposed to heads (strided, as the attention passes it)."""
    enc = encoding(d_head=8, layout=layout, rotary_fraction=fraction).double()
    positions = [0, 3, 77, 1000]
    q = torch.randn(1, len(positions), 2, 8, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(1, 2, len(positions), 8, dtype=torch.float64)
    pos = torch.tensor([positions])
    rotated, _ = enc.rotate(q.transpose(1, 2), q.detach().transpose(1, 2), pos, pos, 0)
    rotated.backward(grad)
    for t, m in enumerate(positions):
        torch.testing.assert_close(q.grad[0, t], grad[0, :, t] @ rotation_matrix(enc.inv_freq, m, layout, 8))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_xpos_rotation_passes_gradcheck(layout: str) -> None:
    """xPos scales cos and sin differently for q and k: finite differences check the backward of both."""
    enc = encoding("xpos", d_head=16, layout=layout).double()
    q, k = (torch.randn(1, 2, 5, 16, dtype=torch.float64, requires_grad=True) for _ in range(2))
    pos = torch.tensor([[0, 4, 9, 30, 31]])
    assert torch.autograd.gradcheck(lambda a, b: enc.rotate(a, b, pos, pos, 0), (q, k))


def interleaved_to_half(d: int) -> torch.Tensor:
    """perm with (P x)[j] = x[perm[j]]: interleaved pair (2i, 2i+1) lands on half pair (i, i + d/2)."""
    return torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))


@settings(max_examples=20, **SETTINGS)
@given(seed=st.integers(0, 2**16), positions=st.lists(st.integers(0, 5000), min_size=1, max_size=5))
def test_layouts_agree_up_to_a_permutation(seed, positions) -> None:
    half, interleaved = encoding(layout="half").double(), encoding(layout="interleaved").double()
    perm = interleaved_to_half(8)
    q = torch.randn(1, 2, len(positions), 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    pos = torch.tensor([positions])
    torch.testing.assert_close(
        half.rotate(q[..., perm], q[..., perm], pos, pos, 0)[0], interleaved.rotate(q, q, pos, pos, 0)[0][..., perm]
    )


def permute_qk_rows(state: dict, cfg: pf.Config, perm: torch.Tensor) -> dict:
    """Reorder the q and k rows of every fused qkv projection, head by head (v untouched)."""
    dh, n_qk_heads = cfg.head_dim, cfg.n_heads + cfg.kv_heads
    rows = torch.arange(n_qk_heads * dh).view(n_qk_heads, dh)[:, perm].flatten()
    out = {}
    for name, tensor in state.items():
        if name.endswith(("qkv.weight", "qkv.bias")):
            tensor = tensor.clone()
            tensor[: n_qk_heads * dh] = tensor[rows]
        out[name] = tensor
    return out


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_decoders_in_both_layouts_agree_once_qk_rows_are_permuted(fraction: float) -> None:
    cfg = tiny(
        "decoder", position="rope", n_kv_heads=2, position_params={"layout": "interleaved", "rotary_fraction": fraction}
    )
    half_cfg = cfg.replace(position_params={"layout": "half", "rotary_fraction": fraction})
    interleaved, half = pf.Transformer(cfg).eval(), pf.Transformer(half_cfg).eval()
    r = int(cfg.head_dim * fraction)
    perm = torch.cat((interleaved_to_half(r), torch.arange(r, cfg.head_dim)))
    half.load_state_dict(permute_qk_rows(interleaved.state_dict(), cfg, perm))
    ids = torch.randint(0, cfg.vocab_size, (2, 9))
    pos = torch.tensor([list(range(9)), list(range(100, 109))])
    torch.testing.assert_close(
        half(ids, position_ids=pos).logits, interleaved(ids, position_ids=pos).logits, rtol=1e-5, atol=1e-5
    )
    assert not torch.allclose(pf.Transformer(half_cfg).eval()(ids).logits, interleaved(ids).logits)


@settings(max_examples=30, **SETTINGS)
@given(
    layout=st.sampled_from(LAYOUTS),
    fraction=st.sampled_from([0.25, 0.5, 1.0]),
    positions=st.lists(st.integers(0, 100000), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_rotation_keeps_the_norm(layout, fraction, positions, seed) -> None:
    enc = encoding(layout=layout, rotary_fraction=fraction)
    q = torch.randn(2, 2, len(positions), 8, generator=torch.Generator().manual_seed(seed))
    pos = torch.tensor([positions, positions])
    rotated, _ = enc.rotate(q, q, pos, pos, 0)
    torch.testing.assert_close(rotated.norm(dim=-1), q.norm(dim=-1), rtol=1e-5, atol=1e-6)


def test_yarn_multiplies_the_rotated_dims_by_its_attention_factor() -> None:
    scaling = {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16}
    enc = encoding(layout="half", rotary_fraction=0.5, scaling=scaling)
    assert enc.attention_factor == pytest.approx(0.1 * math.log(8.0) + 1)
    q = torch.randn(1, 2, 5, 8)
    pos = torch.tensor([[0, 3, 17, 40, 999]])
    rotated, _ = enc.rotate(q, q, pos, pos, 0)
    torch.testing.assert_close(rotated[..., :4].norm(dim=-1), enc.attention_factor * q[..., :4].norm(dim=-1))
    assert torch.equal(rotated[..., 4:], q[..., 4:])


@pytest.mark.parametrize("position", ["rope", "xpos"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_partial_rotary_leaves_the_other_dims_alone(position: str, layout: str, fraction: float) -> None:
    enc = encoding(position, d_head=16, layout=layout, rotary_fraction=fraction)
    r = int(16 * fraction)
    q, k = torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16)
    pos = torch.tensor([[0, 1, 2, 3, 50, 500], [7, 8, 9, 10, 11, 12]])
    q_rot, k_rot = enc.rotate(q, k, pos, pos, 0)
    assert torch.equal(q_rot[..., r:], q[..., r:]) and torch.equal(k_rot[..., r:], k[..., r:])
    torch.testing.assert_close(q_rot[0, :, 0], q[0, :, 0])  # position 0: the identity
    assert not torch.allclose(q_rot[..., 1:, :r], q[..., 1:, :r])


# ------------------------------------------------------------------------------------------- p-RoPE
@pytest.mark.parametrize("p, kept", [(0.5, 4), (0.25, 2), (0.0, 0), (1.0, 8)])
def test_p_rope_leaves_the_dropped_dimensions_unrotated(p: float, kept: int) -> None:
    """Barbero et al. 2024: only the highest round(p * r/2) frequencies rotate. The pairs of the dropped
    (lowest) frequencies come out exactly as they went in, at every position; the kept ones rotate as RoPE's."""
    cfg = tiny("decoder", position="rope", position_params={"frequency_fraction": p}, d_head=16)
    plain = pf.positions.build(tiny("decoder", position="rope", d_head=16), causal=True, n_layers=1)
    rope = pf.positions.build(cfg, causal=True, n_layers=1)
    q = torch.randn(2, 3, 5, 16)
    pos = torch.arange(3, 8).expand(2, 5)
    rotated, _ = rope.rotate(q, q, pos, pos, 0)
    reference, _ = plain.rotate(q, q, pos, pos, 0)
    dropped = [i for i in range(8) if i >= kept] + [i + 8 for i in range(8) if i >= kept]  # "half": (i, i + 8)
    kept_dims = [i for i in range(16) if i not in dropped]
    assert torch.equal(rotated[..., dropped], q[..., dropped])
    torch.testing.assert_close(rotated[..., kept_dims], reference[..., kept_dims])


def test_p_rope_fraction_outside_zero_one_is_named() -> None:
    with pytest.raises(ValueError, match=r"frequency_fraction.*1.5.*a number in \[0, 1\]"):
        tiny("decoder", position="rope", position_params={"frequency_fraction": 1.5})
