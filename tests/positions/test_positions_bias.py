"""Additive-bias encodings (t5, alibi, kerple, fire), each checked by its defining property.

Oracles we did not write: Hugging Face T5's bucket rule and bias lookup, BLOOM's
ALiBi slopes, and the formulas of the papers evaluated by hand.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import T5Config
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.t5.modeling_t5 import T5Attention

import posformer as pf
from posformer.positions import alibi_slopes, t5_bucket
from tests.conftest import tiny

ENCODINGS = [
    ("t5", {}),
    ("alibi", {}),
    ("kerple", {}),
    ("fire", {}),
    ("fire", {"shared": False}),
]
IDS = ["t5", "alibi", "kerple", "fire", "fire-per-layer"]


def hf_bucket(rel: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    return T5Attention._relative_position_bucket(rel, bidirectional, num_buckets, max_distance)


def zero_qk(model: pf.Transformer) -> None:
    """Zero the q and k projections of every self-attention: the logits become the bias alone."""
    for stack in (getattr(model, "encoder", None), getattr(model, "decoder", None)):
        for block in stack.layers if stack is not None else ():
            attn = block.attn
            rows = (attn.n_heads + attn.n_kv_heads) * attn.head_dim
            with torch.no_grad():
                attn.qkv.weight[:rows] = 0


def strengthen(model: pf.Transformer) -> pf.Transformer:
    """Make T5 tables as large as the other biases so that a position error shows in the logits."""
    for module in model.modules():
        if isinstance(module, pf.positions.T5Bias):
            with torch.no_grad():
                module.table.weight.normal_()
    return model


# ------------------------------------------------------------------ T5 buckets
def test_t5_causal_buckets_of_known_distances() -> None:
    expected = {**{d: d for d in range(16)}, 16: 16, 20: 17, 32: 21, 64: 26, 100: 30, 127: 31, 128: 31, 1000: 31}
    distance = torch.tensor(list(expected))
    got = t5_bucket(-distance, bidirectional=False, num_buckets=32, max_distance=128)
    assert got.tolist() == list(expected.values())
    # future keys (rel > 0) all share bucket 0 in the causal form
    assert t5_bucket(torch.arange(1, 50), False).eq(0).all()


def test_t5_bidirectional_uses_16_buckets_per_sign() -> None:
    rel = torch.arange(-300, 301)
    buckets = t5_bucket(rel, bidirectional=True)
    assert set(buckets[rel <= 0].tolist()) == set(range(16))
    # bucket 16 would be "distance 0, key after query": it cannot occur, as rel = 0 counts as <= 0
    assert set(buckets[rel > 0].tolist()) == set(range(17, 32))
    assert buckets[rel == 0].item() == 0 and buckets[rel == 1].item() == 17


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (16, 40), (33, 100)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bucket_equals_hugging_face(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    rel = torch.arange(-300, 301)
    ours = t5_bucket(rel, bidirectional, num_buckets, max_distance)
    assert torch.equal(ours, hf_bucket(rel, bidirectional, num_buckets, max_distance))
    assert ours.dtype == torch.long and 0 <= int(ours.min()) and int(ours.max()) < num_buckets


def t5_cfg(**overrides) -> pf.Config:
    fields = {
        "position": "t5",
        "attn_scale": 1.0,
        "norm": "rmsnorm",
        "activation": "relu",
        "qkv_bias": False,
        "attn_out_bias": False,
        "ffn_bias": False,
        "pad_token_id": 0,
    }
    return tiny("encoder_decoder", **{**fields, **overrides})


def test_t5_one_shared_table_per_stack() -> None:
    model = pf.Transformer(t5_cfg(n_layers=3))
    for stack in (model.encoder, model.decoder):
        tables = [m for m in stack.modules() if isinstance(m, torch.nn.Embedding)]
        assert tables == [stack.position.table]
        assert tuple(stack.position.table.weight.shape) == (32, model.cfg.n_heads)
    assert model.encoder.position.table is not model.decoder.position.table
    assert not model.encoder.position.causal and model.decoder.position.causal


@pytest.mark.parametrize("stack_name", ["encoder", "decoder"])
def test_t5_bias_is_the_table_lookup_of_hugging_face(stack_name: str) -> None:
    cfg = t5_cfg()
    model = strengthen(pf.Transformer(cfg))
    position = getattr(model, stack_name).position
    hf_cfg = T5Config(
        d_model=cfg.d_model,
        d_kv=cfg.head_dim,
        num_heads=cfg.n_heads,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        is_decoder=stack_name == "decoder",
    )
    hf = T5Attention(hf_cfg, has_relative_attention_bias=True)
    hf.relative_attention_bias.weight.data.copy_(position.table.weight.data)
    length = 300
    pos = torch.arange(length)[None]
    q = torch.zeros(1, cfg.n_heads, length, cfg.head_dim)
    ours = [position.bias(q, q, pos, pos, layer) for layer in range(cfg.n_layers)]
    torch.testing.assert_close(ours[0], hf.compute_bias(length, length), rtol=0, atol=0)
    torch.testing.assert_close(ours[1], ours[0], rtol=0, atol=0)
    if stack_name == "decoder":  # one cached step: query at position 299 against keys 0..299
        step = position.bias(q[:, :, -1:], q, pos[:, -1:], pos, 0)
        expected = hf.compute_bias(1, length, cache_position=torch.tensor([length - 1]))
        torch.testing.assert_close(step, expected, rtol=0, atol=0)


def test_t5_bias_reaches_the_attention_unscaled() -> None:
    """With q = k = 0 and scale 1.0 the encoder's probabilities are softmax(table[bucket])."""
    cfg = t5_cfg(attn_impl="eager")
    model = strengthen(pf.Transformer(cfg)).eval()
    zero_qk(model)
    ids = torch.randint(1, cfg.vocab_size, (1, 7))
    probs = model(ids, decoder_input_ids=ids[:, :3], output_attentions=True).attentions[0]  # encoder layer 0
    pos = torch.arange(7)
    table = model.encoder.position.table.weight
    expected = table[hf_bucket(pos[None, :] - pos[:, None], True, 32, 128)].permute(2, 0, 1).softmax(-1)
    torch.testing.assert_close(probs[0], expected)


# ----------------------------------------------------------------------- ALiBi
def test_alibi_slopes_of_8_and_12_heads() -> None:
    eight = [2.0**-k for k in range(1, 9)]
    torch.testing.assert_close(alibi_slopes(8), torch.tensor(eight))
    twelve = eight + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(twelve))


@pytest.mark.parametrize("n_heads", range(1, 34))
def test_alibi_slopes_equal_bloom(n_heads: int) -> None:
    alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n_heads, torch.float32)  # (H, 1, 2)
    bloom = alibi[:, 0, 1]  # slope * position 1
    torch.testing.assert_close(alibi_slopes(n_heads), bloom, rtol=1e-6, atol=0)


@pytest.mark.parametrize("attn_scale", [None, 1.0, 0.05])
def test_alibi_bias_is_linear_in_distance_and_not_scaled(attn_scale: float | None) -> None:
    cfg = tiny("decoder", position="alibi", n_heads=4, attn_scale=attn_scale)
    position = pf.Transformer(cfg).decoder.position
    q_pos = torch.tensor([[0, 3, 9, 40]])
    k_pos = torch.arange(41)[None]
    bias = position.bias(None, None, q_pos, k_pos, 0)
    assert bias.shape == (1, 4, 4, 41) and bias.dtype == torch.float32
    slopes = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8])
    distance = (q_pos[0, :, None] - k_pos[0, None, :]).abs().float()
    torch.testing.assert_close(bias[0], -slopes[:, None, None] * distance, rtol=0, atol=0)


def test_alibi_attention_is_softmax_of_the_unscaled_bias() -> None:
    cfg = tiny("decoder", position="alibi", attn_impl="eager", qkv_bias=False)
    model = pf.Transformer(cfg).eval()
    zero_qk(model)
    probs = model(torch.randint(0, cfg.vocab_size, (1, 6)), output_attentions=True).attentions[0][0]
    i = torch.arange(6)
    distance = (i[:, None] - i[None, :]).float()
    logits = (-alibi_slopes(cfg.n_heads)[:, None, None] * distance).masked_fill(distance < 0, float("-inf"))
    torch.testing.assert_close(probs, logits.softmax(-1))


# ---------------------------------------------------------------------- KERPLE
def test_kerple_bias_is_the_log_kernel() -> None:
    cfg = tiny("decoder", position="kerple", n_layers=3)
    position = pf.Transformer(cfg).decoder.position
    r1, r2 = position.kernel()
    assert r1.shape == r2.shape == (3, cfg.n_heads)
    q_pos, k_pos = torch.tensor([[5, 17]]), torch.tensor([[0, 2, 5, 16, 17]])
    for layer in range(3):
        bias = position.bias(None, None, q_pos, k_pos, layer)
        for h in range(cfg.n_heads):
            for a, m in enumerate(q_pos[0].tolist()):
                for b, n in enumerate(k_pos[0].tolist()):
                    expected = -r1[layer, h].item() * math.log(1 + r2[layer, h].item() * abs(m - n))
                    assert bias[0, h, a, b].item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert not torch.allclose(position.bias(None, None, q_pos, k_pos, 0), position.bias(None, None, q_pos, k_pos, 1))


def test_kerple_parameters_stay_positive_after_a_huge_step() -> None:
    position = pf.Transformer(tiny("decoder", position="kerple")).decoder.position
    pos = torch.arange(50)[None]
    optimizer = torch.optim.SGD(position.parameters(), lr=1e6)
    for _ in range(2):
        loss = -sum(position.bias(None, None, pos, pos, layer).sum() for layer in range(position.n_layers))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    r1, r2 = position.kernel()
    assert (r1 > 0).all() and (r2 > 0).all()
    assert torch.isfinite(position.bias(None, None, pos, pos, 0)).all()


# ------------------------------------------------------------------------ FIRE
def test_fire_bias_at_distance_zero_is_the_mlp_at_zero() -> None:
    position = pf.Transformer(tiny("decoder", position="fire")).decoder.position
    pos = torch.tensor([[0, 4, 900]])
    bias = position.bias(None, None, pos, pos, 1)  # (1, H, 3, 3)
    f0 = torch.relu(position.b1[0]) @ position.w2[0] + position.b2[0]  # f_theta(0) by hand
    for t in range(3):
        torch.testing.assert_close(bias[0, :, t, t], f0)


def test_fire_normalisation_by_hand() -> None:
    position = pf.Transformer(tiny("decoder", position="fire", position_params={"init_c": 0.1})).decoder.position

    def expected(i: int, j: int, L: float) -> float:
        return math.log(0.1 * (i - j) + 1) / (math.log(0.1 * max(L, i) + 1) + 1e-6)

    pairs = [(3, 1), (10, 2), (600, 0), (600, 599), (7, 7)]
    q_pos, k_pos = torch.tensor([[i for i, _ in pairs]]), torch.tensor([[j for _, j in pairs]])
    for L in (512.0, 4.0):
        with torch.no_grad():
            position.L_mult.fill_(L / 512.0)
        x = position.normalized_distance(q_pos, k_pos, 0)[0]
        for a, (i, j) in enumerate(pairs):
            assert x[a, a].item() == pytest.approx(expected(i, j, L), rel=1e-5, abs=1e-7)
        by_hand = torch.relu(expected(10, 2, L) * position.w1[0] + position.b1[0]) @ position.w2[0] + position.b2[0]
        torch.testing.assert_close(position.bias(None, None, q_pos, k_pos, 0)[0, :, 1, 1], by_hand)
    # causal pairs (j <= i) always lie in [0, 1], at any length and for any L
    pos = torch.arange(3000)[None]
    x = position.normalized_distance(pos[:, ::7], pos, 0)[0]
    attended = pos[0, ::7, None] >= pos[0, None, :]
    assert x[attended].min() >= 0 and x[attended].max() <= 1


def test_fire_shared_or_per_layer() -> None:
    shared = pf.Transformer(tiny("decoder", position="fire", n_layers=3)).decoder.position
    per_layer = pf.Transformer(
        tiny("decoder", position="fire", n_layers=3, position_params={"shared": False})
    ).decoder.position
    assert shared.w2.shape == (1, 32, 4) and per_layer.w2.shape == (3, 32, 4)
    pos = torch.arange(9)[None]
    assert torch.equal(shared.bias(None, None, pos, pos, 0), shared.bias(None, None, pos, pos, 2))
    assert not torch.allclose(per_layer.bias(None, None, pos, pos, 0), per_layer.bias(None, None, pos, pos, 2))


# ------------------------------------------------------- decoding and padding
@pytest.mark.parametrize("position,params", ENCODINGS, ids=IDS)
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_kv_cache_equals_full_pass(position: str, params: dict, kv_heads: int) -> None:
    cfg = tiny("decoder", position=position, position_params=params, n_kv_heads=kv_heads)
    model = strengthen(pf.Transformer(cfg)).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 11))
    full = model(ids).logits
    cache = pf.Cache(cfg.n_layers)
    steps = [model(ids[:, :4], cache=cache).logits]
    for t in range(4, ids.shape[1]):
        steps.append(model(ids[:, t : t + 1], cache=cache).logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position,params", ENCODINGS, ids=IDS)
def test_left_padding_with_position_ids_matches_unpadded(position: str, params: dict) -> None:
    cfg = tiny("decoder", position=position, position_params=params)
    model = strengthen(pf.Transformer(cfg)).eval()
    short = torch.randint(1, cfg.vocab_size, (1, 5))
    long = torch.randint(1, cfg.vocab_size, (1, 8))
    batch = torch.cat((torch.cat((torch.zeros(1, 3, dtype=torch.long), short), 1), long))
    mask = torch.tensor([[0] * 3 + [1] * 5, [1] * 8])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(batch, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(logits[0, 3:], model(short).logits[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[1], model(long).logits[0], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("position,params", ENCODINGS, ids=IDS)
def test_kv_cache_encoder_decoder_equals_full_pass(position: str, params: dict) -> None:
    cfg = t5_cfg(position=position, position_params=params)
    model = strengthen(pf.Transformer(cfg)).eval()
    src = torch.randint(1, cfg.vocab_size, (2, 7))
    src_mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    tgt = torch.randint(1, cfg.vocab_size, (2, 6))
    full = model(src, attention_mask=src_mask, decoder_input_ids=tgt).logits
    out = model(src, attention_mask=src_mask, decoder_input_ids=tgt[:, :1], use_cache=True)
    steps = [out.logits]
    for t in range(1, tgt.shape[1]):
        out = model(
            src, decoder_input_ids=tgt[:, t : t + 1], cache=out.cache, decoder_position_ids=torch.full((2, 1), t)
        )
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position,params", ENCODINGS, ids=IDS)
def test_bias_is_finite_far_beyond_training_lengths(position: str, params: dict) -> None:
    cfg = tiny("decoder", position=position, position_params=params, max_positions=16)
    model = pf.Transformer(cfg).eval()
    pos = torch.arange(4000, 4010)[None]
    logits = model(torch.randint(0, cfg.vocab_size, (1, 10)), position_ids=pos).logits
    assert torch.isfinite(logits).all()


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    "position,params,key",
    [
        ("t5", {"num_buckets": 0}, "num_buckets"),
        ("t5", {"num_buckets": 8.0}, "num_buckets"),
        ("t5", {"max_distance": -5}, "max_distance"),
        ("t5", {"num_buckets": 32, "max_distance": 16}, "max_distance"),
        ("fire", {"mlp_width": 0}, "mlp_width"),
        ("fire", {"init_c": -0.1}, "init_c"),
        ("fire", {"init_L": 0}, "init_L"),
        ("fire", {"shared": "yes"}, "shared"),
        ("alibi", {"slope": 1}, "slope"),
        ("kerple", {"r1": 1}, "r1"),
    ],
)
def test_bad_params_raise_naming_the_key(position: str, params: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        tiny("decoder", position=position, position_params=params)


def test_t5_max_distance_bound_depends_on_the_arch() -> None:
    # an encoder is bidirectional only: 32 buckets leave 8 exact distances per sign, so 16 is fine
    tiny("encoder", position="t5", position_params={"max_distance": 16})
    with pytest.raises(ValueError, match=r"max_distance'\]=16 .*: expected an integer > 16"):
        tiny("encoder_decoder", position="t5", position_params={"max_distance": 16})
    # the bound is a stack's: its exact distances, num_buckets // 2 causal and // 4 a side bidirectional
    t5, sizes = pf.positions.get("t5"), pf.positions.Sizes(d_model=8, n_heads=2, head_dim=4)
    params = t5.resolve_params({"max_distance": 16})
    t5.check_config(sizes, params, causal=False)
    with pytest.raises(ValueError, match="an integer > 16"):
        t5.check_config(sizes, params, causal=True)
