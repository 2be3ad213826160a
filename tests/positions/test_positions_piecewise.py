"""The RoPE encodings with a piecewise (query, key) distance (ReRoPE, Self-Extend, dual chunk attention,
StreamingLLM) against a naive reference written here: each pair's distance from the papers' rules, the query
rotated by it pair by pair, O(T^2 d). Then the properties: a window that covers the length is RoPE, ReRoPE's far
pairs score as distance w, bad parameters are named. The bounded StreamingLLM cache: test_positions_streaming.py;
the shared conformance suite at small windows: test_positions_piecewise_conformance.py."""

from __future__ import annotations

import math

import pytest
import torch

import posformer as pf
from posformer.positions.rotary import rope_inv_freq

ROPE = {"theta": 500.0, "layout": "half", "rotary_fraction": 1.0}


def rerope_distance(i: int, j: int, p: dict) -> int:
    return i - j if i - j < p["window"] else p["window"]


def self_extend_distance(i: int, j: int, p: dict) -> int:
    g, w = p["group_size"], p["neighbor_window"]
    return i - j if i - j < w else i // g - j // g + w - w // g


def dual_chunk_distance(i: int, j: int, p: dict) -> int:
    size = p["chunk_size"]
    c = size - p["local_size"]
    if i // c == j // c:
        return i - j
    if i // c - j // c == 1:
        return min(i % c + c, size) - j % c
    return min(2 * c - 1, size) - j % c


def streaming_distance(i: int, j: int, p: dict) -> int | None:
    """None: the key is out of the cache."""
    sinks, window = p["sinks"], p["window"]
    if j < sinks:
        return min(i, sinks + window - 1) - j
    return i - j if i - j < window else None


CASES = [
    ("rerope", {"window": 3}, rerope_distance),
    ("rerope", {"window": 1}, rerope_distance),
    ("self_extend", {"group_size": 3, "neighbor_window": 4}, self_extend_distance),
    ("self_extend", {"group_size": 2, "neighbor_window": 5}, self_extend_distance),
    ("dual_chunk", {"chunk_size": 5, "local_size": 1}, dual_chunk_distance),
    ("dual_chunk", {"chunk_size": 4, "local_size": 0}, dual_chunk_distance),
    ("dual_chunk", {"chunk_size": 5, "local_size": 3}, dual_chunk_distance),  # inter-chunk queries at 2c - 1
    ("streaming", {"sinks": 2, "window": 3}, streaming_distance),
    ("streaming", {"sinks": 0, "window": 4}, streaming_distance),
]


def rotated(x: torch.Tensor, angle_of: float, inv_freq: torch.Tensor, layout: str) -> torch.Tensor:
    """x (..., dh) with each rotated pair m turned by angle_of * inv_freq[m], one pair at a time."""
    half = inv_freq.numel()
    out = x.clone()
    for m in range(half):
        a, b = (m, m + half) if layout == "half" else (2 * m, 2 * m + 1)
        c, s = math.cos(angle_of * float(inv_freq[m])), math.sin(angle_of * float(inv_freq[m]))
        out[..., a] = c * x[..., a] - s * x[..., b]
        out[..., b] = s * x[..., a] + c * x[..., b]
    return out


def naive_logits(q, k, q_pos, k_pos, distance, params, scale):
    """scale * (R(d(i, j)) q_i) . k_j for every pair with k_pos <= q_pos, from unrotated q (B, H, Tq, dh) and
    k (B, Hkv, Tk, dh); NaN where the key is later, -inf where the method hides it."""
    dim = int(q.shape[-1] * params["rotary_fraction"])
    inv_freq = rope_inv_freq(dim, params["theta"])[0].double()
    group = q.shape[1] // k.shape[1]
    out = torch.full((*q.shape[:3], k.shape[2]), float("nan"), dtype=torch.float64)
    for b in range(q.shape[0]):
        for i in range(q.shape[2]):
            for j in range(k.shape[2]):
                qi, kj = int(q_pos[b, i]), int(k_pos[b, j])
                if kj > qi:
                    continue
                d = distance(qi, kj, params)
                if d is None:
                    out[b, :, i, j] = -float("inf")
                    continue
                turned = rotated(q[b, :, i], d, inv_freq, params["layout"])  # (H, dh)
                keys = k[b, :, j].repeat_interleave(group, dim=0)
                out[b, :, i, j] = scale * (turned * keys).sum(-1)
    return out


def encoding(name: str, params: dict, n_heads: int = 4, head_dim: int = 8) -> pf.positions.PositionEncoding:
    cls = pf.positions.get(name)
    sizes = pf.positions.Sizes(d_model=n_heads * head_dim, n_heads=n_heads, head_dim=head_dim)
    resolved = cls.resolve_params(params)
    cls.check_config(sizes, resolved)
    return cls(sizes, resolved).double()


def hook_logits(enc, q, k, q_pos, k_pos) -> torch.Tensor:
    """What attention adds up: scale * q.k after `rotate`, plus `bias` (B, H, Tq, Tk)."""
    q_rot, k_rot = enc.rotate(q, k, q_pos, k_pos, 0)
    keys = k_rot.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    bias = enc.bias(q_rot, k_rot, q_pos, k_pos, 0)
    return enc.scale * q_rot @ keys.transpose(-1, -2) + (0.0 if bias is None else bias)


@pytest.mark.parametrize("name, params, distance", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
@pytest.mark.parametrize("layout, fraction", [("half", 1.0), ("interleaved", 0.5)])
@pytest.mark.parametrize("queries", ["all", "last 3 (cached keys)"])
def test_each_pair_scores_as_the_naive_reference(name, params, distance, layout, fraction, queries) -> None:
    """Every visible pair's logit equals the naive reference's; hidden pairs get a huge negative bias. Rows of
    positions from 0 and from 5, four query heads over two key heads, a partial rotary dimension."""
    params = {**ROPE, "layout": layout, "rotary_fraction": fraction, **params}
    enc = encoding(name, params)
    generator = torch.Generator().manual_seed(0)
    length = 13
    k_pos = torch.stack((torch.arange(length), torch.arange(length) + 5))
    q_pos = k_pos if queries == "all" else k_pos[:, -3:]
    q = torch.randn(2, 4, q_pos.shape[1], 8, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 2, length, 8, generator=generator, dtype=torch.float64)
    ours = hook_logits(enc, q, k, q_pos, k_pos)
    expected = naive_logits(q, k, q_pos, k_pos, distance, params, enc.scale)
    visible = torch.isfinite(expected)
    torch.testing.assert_close(ours[visible], expected[visible], rtol=1e-10, atol=1e-10)
    hidden = expected == -float("inf")
    assert bool((ours[hidden] < -1e300).all())
    assert bool(hidden.any()) == (name == "streaming")


PIECEWISE = ["rerope", "self_extend", "dual_chunk", "streaming"]
COVERING = [  # parameters under which every pair of 24 tokens keeps its distance i - j
    ("rerope", {"window": 24}),
    ("self_extend", {"group_size": 4, "neighbor_window": 24}),
    ("self_extend", {"group_size": 1, "neighbor_window": 2}),  # G = 1: grouped positions are the positions
    ("dual_chunk", {"chunk_size": 24, "local_size": 4}),  # chunk_size >= the length
    ("streaming", {"sinks": 4, "window": 24}),
]


@pytest.mark.parametrize("name, params", COVERING, ids=[f"{n}-{p}" for n, p in COVERING])
def test_a_window_that_covers_the_length_is_rope_with_the_same_weights(name: str, params: dict) -> None:
    rope_params = {"theta": 500.0, "layout": "interleaved", "rotary_fraction": 0.5}
    fields = dict(arch="decoder", vocab_size=53, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, init_std=0.3)
    rope = pf.Transformer(pf.Config(**fields, position="rope", position_params=rope_params)).eval()
    model = pf.Transformer(pf.Config(**fields, position=name, position_params={**rope_params, **params})).eval()
    model.load_state_dict(rope.state_dict())
    ids = torch.randint(1, 53, (2, 24))
    mask = torch.tensor([[0] * 5 + [1] * 19, [1] * 24])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, rope(ids).logits)
        torch.testing.assert_close(
            model(ids, attention_mask=mask, position_ids=pos).logits,
            rope(ids, attention_mask=mask, position_ids=pos).logits,
        )


def test_rerope_scores_every_far_pair_as_the_pair_at_distance_w() -> None:
    """With one query vector and one key vector at every position, a logit depends on the distance alone: ReRoPE's
    equals RoPE's at distances below w and RoPE's at w beyond it."""
    w, length = 4, 12
    rope, rerope = encoding("rope", ROPE), encoding("rerope", {**ROPE, "window": w})
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 1, 8, generator=generator, dtype=torch.float64).repeat(1, 1, length, 1)
    k = torch.randn(1, 4, 1, 8, generator=generator, dtype=torch.float64).repeat(1, 1, length, 1)
    pos = torch.arange(length)[None]
    plain, ours = hook_logits(rope, q, k, pos, pos)[0], hook_logits(rerope, q, k, pos, pos)[0]
    for i in range(length):
        for j in range(i + 1):
            at = (i - j, 0) if i - j < w else (w, 0)
            torch.testing.assert_close(ours[:, i, j], plain[:, at[0], at[1]], rtol=1e-12, atol=1e-12)


def test_rope_parameters_carry_over_and_a_method_keeps_rope_weights_keys() -> None:
    """A rope config's position_params plus the method's own make a valid config with the same state_dict keys."""
    rope = pf.Config(arch="decoder", vocab_size=53, d_model=32, n_layers=1, n_heads=4, position="rope")
    for name in PIECEWISE:
        cfg = rope.replace(position=name, position_params={**rope.position_params})
        assert {k: cfg.position_params[k] for k in rope.position_params} == dict(rope.position_params)
        assert pf.Transformer(cfg).state_dict().keys() == pf.Transformer(rope).state_dict().keys()


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("rerope", {"window": 0}, r"position_params\['window'\]=0 is invalid for position='rerope'"),
        ("self_extend", {"group_size": 0}, r"position_params\['group_size'\]=0 is invalid"),
        ("self_extend", {"neighbor_window": -1}, r"position_params\['neighbor_window'\]=-1 is invalid"),
        ("dual_chunk", {"chunk_size": 8, "local_size": 8}, r"position_params\['local_size'\]=8 is invalid.*\[0, "),
        ("dual_chunk", {"chunk_size": 1}, r"position_params\['chunk_size'\]=1 is invalid"),
        ("streaming", {"window": 0}, r"position_params\['window'\]=0 is invalid for position='streaming'"),
        ("streaming", {"sinks": -1}, r"position_params\['sinks'\]=-1 is invalid"),
        ("rerope", {"scaling": {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}}, "scaling"),
        ("self_extend", {"theta": 0.5}, r"position_params\['theta'\]=0.5 is invalid"),
    ],
)
def test_a_bad_parameter_is_named(name: str, params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pf.Config(
            arch="decoder", vocab_size=53, d_model=32, n_layers=1, n_heads=4, position=name, position_params=params
        )


def test_flex_attention_is_refused_by_name() -> None:
    for name in PIECEWISE:
        with pytest.raises(ValueError, match="second q.k product"):
            pf.Config(arch="decoder", vocab_size=53, d_model=32, n_layers=1, n_heads=4, position=name, attn_impl="flex")


@pytest.mark.parametrize("name", PIECEWISE)
def test_sixteen_times_the_training_length_runs_in_blocks_of_queries(name: str, monkeypatch) -> None:
    """At 16 x the training length with the bias budget shrunk so that it is asked for in blocks (as a long
    sequence is at the real budget), every bias the encoding makes covers one block of queries, never (T, T),
    and the logits and gradients (each block checkpointed) are those of the whole bias. (The real budget at
    16,384 tokens: docs/positions.md.)"""
    import posformer.modules.bias_blocks as bias_blocks

    cfg = pf.Config(
        arch="decoder", vocab_size=53, d_model=32, n_layers=2, n_heads=4, position=name,
        position_params=pf.positions.get(name).for_lengths({}, 256, 16), max_positions=16, init_std=0.3,
    )  # fmt: skip
    model = pf.Transformer(cfg).double()
    ids = torch.randint(1, 53, (1, 256))

    def logits_and_grads():
        model.zero_grad()
        out = model(ids, labels=ids)
        out.loss.backward()
        return out.logits, [p.grad.clone() for p in model.parameters()]

    whole, whole_grads = logits_and_grads()
    shapes = []
    bias = type(model.decoder.position).bias
    monkeypatch.setattr(
        type(model.decoder.position), "bias", lambda self, *a: shapes.append(a[0].shape[-2]) or bias(self, *a)
    )
    monkeypatch.setitem(bias_blocks.BIAS_BYTES, "cpu", (1024, 32 * 4 * 256 * 4))
    blocked, blocked_grads = logits_and_grads()
    torch.testing.assert_close(blocked, whole, rtol=1e-10, atol=1e-10)
    for grad, expected in zip(blocked_grads, whole_grads):
        torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-9)
    assert shapes and max(shapes) == 32 and len(shapes) == 2 * 2 * 256 // 32  # forward and recomputed in backward
