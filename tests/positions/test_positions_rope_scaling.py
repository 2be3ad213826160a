"""RoPE scalings against Hugging Face: `ROPE_INIT_FUNCTIONS` and Llama's rotary embedding
(transformers 4.57.6), the closed formula of "ntk", and the validation of scaling parameters.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

import posformer as pf
from posformer.positions import rope_inv_freq
from posformer.positions.rope_scaling import SCALING_TYPES
from tests.conftest import tiny

LLAMA31 = {
    "type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def hf_config(dim: int, theta: float, scaling: dict, max_positions: int) -> LlamaConfig:
    """A LlamaConfig with head_dim=dim and our scaling dict written the Hugging Face way."""
    rope_scaling = {("rope_type" if k == "type" else k): v for k, v in scaling.items()}
    if scaling["type"] == "dynamic":  # HF's dynamic reads its original length from max_position_embeddings
        rope_scaling.pop("original_max_position_embeddings")
    return LlamaConfig(
        hidden_size=2 * dim,
        num_attention_heads=2,
        head_dim=dim,
        rope_theta=theta,
        max_position_embeddings=max_positions,
        rope_scaling=rope_scaling,
    )


def hf_inv_freq(dim: int, theta: float, scaling: dict, max_positions: int, seq_len=None):
    cfg = hf_config(dim, theta, scaling, max_positions)
    return ROPE_INIT_FUNCTIONS[scaling["type"]](cfg, torch.device("cpu"), seq_len=seq_len)


def assert_same_freqs(ours: tuple, theirs: tuple) -> None:
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=0)
    assert ours[0].dtype == torch.float32 and ours[0].shape == theirs[0].shape
    assert ours[1] == pytest.approx(theirs[1], rel=1e-12)


# ------------------------------------------------------------- rope_inv_freq against Hugging Face
DIMS, FACTORS = [32, 64, 128], [2.0, 4.0, 8.0]


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("factor", FACTORS)
def test_linear_matches_hf(dim: int, factor: float) -> None:
    scaling = {"type": "linear", "factor": factor}
    assert_same_freqs(rope_inv_freq(dim, 10000.0, scaling), hf_inv_freq(dim, 10000.0, scaling, 2048))
    torch.testing.assert_close(rope_inv_freq(dim, 10000.0, scaling)[0], rope_inv_freq(dim)[0] / factor)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("seq_len", [None, 100, 2048, 2049, 3000, 20000])
def test_dynamic_matches_hf(dim: int, factor: float, seq_len: int | None) -> None:
    scaling = {"type": "dynamic", "factor": factor, "original_max_position_embeddings": 2048}
    ours = rope_inv_freq(dim, 10000.0, scaling, seq_len=seq_len)
    assert_same_freqs(ours, hf_inv_freq(dim, 10000.0, scaling, 2048, seq_len))
    unscaled = rope_inv_freq(dim, 10000.0)[0]
    assert torch.equal(ours[0], unscaled) == (seq_len is None or seq_len <= 2048)


def test_dynamic_matches_hf_with_a_tensor_length() -> None:
    """HF's own forward passes seq_len as a tensor (max position + 1), computed in float32."""
    scaling = {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 2048}
    theirs = hf_inv_freq(64, 10000.0, scaling, 2048, torch.tensor(5000))
    torch.testing.assert_close(rope_inv_freq(64, 10000.0, scaling, seq_len=5000)[0], theirs[0], rtol=1e-5, atol=0)


YARN_VARIANTS = [
    {},
    {"truncate": False},
    {"beta_fast": 16.0, "beta_slow": 2.0},
    {"mscale": 0.707, "mscale_all_dim": 0.707},  # DeepSeek-V2 style: the factors cancel to 1.0
    {"mscale": 1.0, "mscale_all_dim": 0.5},
    {"mscale": 1.0},  # without mscale_all_dim: 0.1 ln(s) + 1
    {"attention_factor": 1.5},  # an explicit factor wins
]


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("variant", YARN_VARIANTS, ids=lambda v: "-".join(v) or "defaults")
def test_yarn_matches_hf(dim: int, factor: float, variant: dict) -> None:
    scaling = {"type": "yarn", "factor": factor, "original_max_position_embeddings": 2048, **variant}
    ours = rope_inv_freq(dim, 10000.0, scaling)
    assert_same_freqs(ours, hf_inv_freq(dim, 10000.0, scaling, int(2048 * factor)))
    if not variant:
        assert ours[1] == pytest.approx(0.1 * math.log(factor) + 1)
        unscaled = rope_inv_freq(dim)[0]
        assert ours[0][0] == unscaled[0]  # the highest frequency is extrapolated, unchanged
        torch.testing.assert_close(ours[0][-1], unscaled[-1] / factor)  # the lowest is interpolated


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_llama3_matches_hf(dim: int, factor: float, theta: float) -> None:
    scaling = {**LLAMA31, "factor": factor}
    assert_same_freqs(rope_inv_freq(dim, theta, scaling), hf_inv_freq(dim, theta, scaling, 131072))


def test_llama31_settings_match_hf() -> None:
    ours = rope_inv_freq(128, 500000.0, LLAMA31)
    assert_same_freqs(ours, hf_inv_freq(128, 500000.0, LLAMA31, 131072))
    unscaled = rope_inv_freq(128, 500000.0)[0]
    wavelen = 2 * math.pi / unscaled
    short, long = wavelen < 8192 / 4, wavelen > 8192 / 1
    assert short.any() and long.any()
    assert torch.equal(ours[0][short], unscaled[short])
    torch.testing.assert_close(ours[0][long], unscaled[long] / 8)


@pytest.mark.parametrize("dim", [4, 32, 64, 128])
@pytest.mark.parametrize("factor", FACTORS)
def test_ntk_matches_its_closed_formula(dim: int, factor: float) -> None:
    inv_freq, attention_factor = rope_inv_freq(dim, 10000.0, {"type": "ntk", "factor": factor})
    base = 10000.0 * factor ** (dim / (dim - 2))
    expected = torch.tensor([base ** (-2 * i / dim) for i in range(dim // 2)], dtype=torch.float64)
    torch.testing.assert_close(inv_freq.double(), expected, rtol=1e-6, atol=0)
    assert attention_factor == 1.0
    unscaled = rope_inv_freq(dim)[0]
    assert inv_freq[0] == unscaled[0]  # the highest frequency is kept ...
    torch.testing.assert_close(inv_freq[-1], unscaled[-1] / factor)  # ... the lowest is interpolated


def test_unscaled_default_matches_hf() -> None:
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=1, rope_theta=500000.0)
    assert_same_freqs(rope_inv_freq(64, 500000.0), ROPE_INIT_FUNCTIONS["default"](cfg, torch.device("cpu")))


# ------------------------------------------------------------------------------- validation
def rope_cfg(**params) -> pf.Config:
    return tiny("decoder", position="rope", position_params=params)


def config_error(**params) -> str:
    with pytest.raises(ValueError) as info:
        rope_cfg(**params)
    return str(info.value)


def test_unknown_scaling_type_names_the_param_and_the_allowed_types() -> None:
    message = config_error(scaling={"type": "mrope", "factor": 2.0})
    assert "position_params['scaling']" in message and "'mrope'" in message
    assert all(kind in message for kind in SCALING_TYPES)
    message = config_error(scaling={"rope_type": "linear", "factor": 2.0})
    assert "position_params['scaling']" in message and "'type'" in message
    assert "position_params['scaling']" in config_error(scaling="linear")


@pytest.mark.parametrize(
    "scaling, key",
    [
        ({"type": "linear"}, "factor"),
        ({"type": "dynamic", "factor": 2.0}, "original_max_position_embeddings"),
        ({"type": "yarn", "factor": 2.0}, "original_max_position_embeddings"),
        ({**LLAMA31, "low_freq_factor": None}, "low_freq_factor"),
        ({k: v for k, v in LLAMA31.items() if k != "high_freq_factor"}, "high_freq_factor"),
    ],
)
def test_missing_key_is_named(scaling: dict, key: str) -> None:
    message = config_error(scaling=scaling)
    assert "position_params['scaling']" in message and repr(key) in message
    with pytest.raises(ValueError, match=key):
        rope_inv_freq(16, 10000.0, scaling)


@pytest.mark.parametrize(
    "scaling, key",
    [
        ({"type": "linear", "factor": 0.5}, "factor"),
        ({"type": "linear", "factor": True}, "factor"),
        ({"type": "linear", "factor": 2.0, "beta_fast": 4.0}, "beta_fast"),
        ({"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 0}, "original_max_position_embeddings"),
        ({"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "beta_fast": 1.0}, "beta_fast"),
        ({"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "truncate": 1}, "truncate"),
        ({**LLAMA31, "high_freq_factor": 1.0}, "high_freq_factor"),
    ],
)
def test_bad_scaling_value_is_named(scaling: dict, key: str) -> None:
    message = config_error(scaling=scaling)
    assert "position_params['scaling']" in message and repr(key) in message


def test_ntk_needs_a_rotary_dim_above_two() -> None:
    message = config_error(scaling={"type": "ntk", "factor": 2.0}, rotary_fraction=0.25)  # head_dim 8 -> 2
    assert "position_params['scaling']" in message and "'ntk'" in message


@pytest.mark.parametrize("position", ["rope", "xpos"])
@pytest.mark.parametrize("d_model, fraction", [(32, 0.375), (24, 0.5), (40, 0.3)])
def test_odd_rotary_dim_names_rotary_fraction(position: str, d_model: int, fraction: float) -> None:
    with pytest.raises(ValueError, match="rotary_fraction"):
        tiny("decoder", d_model=d_model, position=position, position_params={"rotary_fraction": fraction})


def test_rope_inv_freq_refuses_an_odd_dim() -> None:
    with pytest.raises(ValueError, match="even"):
        rope_inv_freq(7)


def test_scaling_round_trips_through_the_config() -> None:
    cfg = rope_cfg(scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "truncate": False})
    assert pf.Config.from_dict(cfg.to_dict()) == cfg
    assert pf.positions.get("rope").defaults["scaling"] is None


# ------------------------------------------------------------ the encoding against Hugging Face's Llama
@pytest.mark.parametrize(
    "scaling",
    [
        {"type": "linear", "factor": 4.0},
        {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 16},
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 0.5},
        {
            "type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ],
    ids=lambda s: s["type"],
)
def test_rotary_encoding_matches_hf_llama_rotary(scaling: dict) -> None:
    """Rotary (layout "half") rotates q and k as Llama's rotary embedding + apply_rotary_pos_emb,
    attention factor on cos and sin included; "dynamic" from this forward's positions (max 39 > 16)."""
    cfg = tiny("decoder", d_model=32, n_heads=2, position="rope", position_params={"scaling": scaling})
    ours = pf.positions.build(cfg, causal=True, n_layers=1)
    hf = LlamaRotaryEmbedding(hf_config(16, 10000.0, scaling, 16 if scaling["type"] == "dynamic" else 64))
    pos = torch.stack((torch.arange(20, 40), torch.arange(3, 23)))
    q, k = torch.randn(2, 2, 20, 16), torch.randn(2, 2, 20, 16)
    cos, sin = hf(q, pos)
    expected = apply_rotary_pos_emb(q, k, cos, sin)
    got = ours.rotate(q, k, pos, pos, 0)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------- LongRoPE
def longrope(dim: int, original: int = 64, factor: float = 4.0, **extra) -> dict:
    g = torch.Generator().manual_seed(dim)
    short = (1.0 + torch.rand(dim // 2, generator=g)).tolist()
    long = (1.0 + 30 * torch.rand(dim // 2, generator=g)).tolist()
    return {
        "type": "longrope",
        "factor": factor,
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": original,
        **extra,
    }


def hf_longrope(dim: int, scaling: dict, seq_len=None):
    """HF's longrope configured two ways: as Phi-3 does (the original length at the top of the config, the
    factor the ratio of the two lengths), and, with an attention factor given (which Phi3Config refuses), in
    a LlamaConfig whose rope_scaling holds the factor (the original length is then max_position_embeddings)."""
    from transformers import Phi3Config

    original = scaling["original_max_position_embeddings"]
    factors = {"short_factor": scaling["short_factor"], "long_factor": scaling["long_factor"]}
    if scaling.get("attention_factor") is None:
        cfg = Phi3Config(
            hidden_size=2 * dim,
            num_attention_heads=2,
            rope_theta=10000.0,
            rope_scaling={"type": "longrope", **factors},
            original_max_position_embeddings=original,
            max_position_embeddings=int(original * scaling["factor"]),
        )
    else:
        cfg = LlamaConfig(
            hidden_size=2 * dim,
            num_attention_heads=2,
            head_dim=dim,
            rope_theta=10000.0,
            max_position_embeddings=original,
            rope_scaling={
                "rope_type": "longrope",
                "factor": scaling["factor"],
                "attention_factor": scaling["attention_factor"],
                **factors,
            },
        )
    return ROPE_INIT_FUNCTIONS["longrope"](cfg, torch.device("cpu"), seq_len=seq_len)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("seq_len", [None, 10, 64, 65, 1000])
@pytest.mark.parametrize("extra", [{}, {"attention_factor": 1.3}], ids=["default-factor", "given-factor"])
def test_longrope_matches_hf(dim: int, seq_len: int | None, extra: dict) -> None:
    scaling = longrope(dim, **extra)
    assert_same_freqs(rope_inv_freq(dim, 10000.0, scaling, seq_len=seq_len), hf_longrope(dim, scaling, seq_len))


def test_longrope_switches_exactly_past_the_original_length() -> None:
    """The short factors up to L = original (largest position original - 1), the long ones from original + 1;
    the attention factor is the paper's sqrt(1 + ln(factor) / ln(original)) on both sides."""
    scaling = longrope(32, original=64, factor=4.0)
    cfg = tiny("decoder", position="rope", position_params={"scaling": scaling}, d_head=32, max_positions=256)
    rope = pf.positions.build(cfg, causal=True, n_layers=1)
    base = 10000.0 ** (torch.arange(0, 32, 2).float() / 32)
    for seq_len, key in ((64, "short_factor"), (65, "long_factor"), (1, "short_factor"), (256, "long_factor")):
        inv_freq, factor = rope.frequencies_for(seq_len)
        torch.testing.assert_close(inv_freq, 1.0 / (torch.tensor(scaling[key]) * base), rtol=1e-6, atol=0)
        assert factor == pytest.approx(math.sqrt(1 + math.log(4.0) / math.log(64)))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"short_factor": [1.0, 2.0]},
            "short_factor'\\]=\\[1.0, 2.0\\] is invalid for type 'longrope': expected a list of 8",
        ),
        ({"long_factor": [1.0] * 7 + [0.0]}, "long_factor'\\].* expected a list of 8 numbers > 0"),
        ({"attention_factor": -1.0}, "attention_factor'\\]=-1.0 is invalid"),
    ],
)
def test_longrope_bad_factors_are_named(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rope_inv_freq(16, 10000.0, {**longrope(16), **change})
