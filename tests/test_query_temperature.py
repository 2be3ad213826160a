"""Log-n query temperature (`Config.query_temperature`): one attention layer equals transformers 4.57.6's Llama 4
NoPE layer with `attn_temperature_tuning`; cached decoding and left padding stay exact; t(p) = 1 before the
first floor step; bad settings name the field."""

import pytest
import torch
from transformers import Llama4TextConfig
from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

import posformer as pf
from posformer.ops.masks import build_mask
from tests.positions.test_positions_conformance import cached_left_padded_steps, config

TEMPERATURE = {"scale": 0.5, "floor_size": 4}


@torch.no_grad()
def test_a_nope_layer_with_temperature_equals_hf_llama4_attention() -> None:
    """20 positions with floor_size 4: five temperature steps. Llama 4 adds no temperature to its RoPE layers, so
    the oracle is its NoPE layer (no_rope_layers[0] = 0), without QK-norm (which it gives RoPE layers only)."""
    hf_config = Llama4TextConfig(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=40,
        num_hidden_layers=1,
        no_rope_layers=[0],
        attn_temperature_tuning=True,
        floor_scale=4,
        attn_scale=0.5,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    theirs = Llama4TextAttention(hf_config, layer_idx=0).eval()
    assert not theirs.use_rope
    model = pf.Transformer(
        config(
            "none",
            "decoder",
            n_layers=1,
            n_kv_heads=2,
            d_head=8,
            qkv_bias=False,
            attn_out_bias=False,
            query_temperature=TEMPERATURE,
        )
    ).eval()
    ours = model.decoder.layers[0].attn
    ours.qkv.weight.copy_(torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight]))
    ours.out.weight.copy_(theirs.o_proj.weight)
    x = torch.randn(2, 20, 32)
    causal = torch.full((20, 20), float("-inf")).triu(1)[None, None]
    expected, _ = theirs(x, position_embeddings=None, attention_mask=causal, cache_position=torch.arange(20))
    got, _ = ours(x, build_mask(None, True, 20, 20, x.dtype, x.device), torch.arange(20).expand(2, 20))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def _with_temperature(position: str = "rope", **changes) -> pf.Transformer:
    torch.manual_seed(0)
    return pf.Transformer(
        config(
            position,
            "decoder",
            n_layers=2,
            layer_types=["nope", "full_attention"],
            layer_settings={"nope": {"position": "none", "query_temperature": TEMPERATURE}},
            **changes,
        )
    ).eval()


def test_cached_decoding_of_a_left_padded_batch_equals_the_full_pass() -> None:
    model = _with_temperature()
    ids = torch.randint(1, 53, (2, 14))
    mask = torch.tensor([[0] * 3 + [1] * 11, [1] * 14])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    full = model(ids, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(cached_left_padded_steps(model, ids, mask, pos, prefix=5), full, atol=1e-5, rtol=1e-5)
    alone = model(ids[:1, 3:]).logits  # the left-padded row on its own: the temperature of its real positions
    torch.testing.assert_close(full[0, 3:], alone[0], atol=1e-5, rtol=1e-5)


def test_the_temperature_is_one_before_the_first_floor_step_and_grows_after() -> None:
    tempered = _with_temperature()
    plain = pf.Transformer(tempered.cfg.replace(layer_settings={"nope": {"position": "none"}})).eval()
    plain.load_state_dict(tempered.state_dict())
    ids = torch.randint(1, 53, (1, 12))
    a, b = tempered(ids).logits, plain(ids).logits
    torch.testing.assert_close(a[:, :3], b[:, :3], atol=0, rtol=0)  # p + 1 < 4: t(p) = 1
    assert (a[:, 3:] - b[:, 3:]).abs().amax(-1).min() > 1e-4


@pytest.mark.parametrize(
    "value",
    [
        {"scale": 0.1},
        {"scale": -1, "floor_size": 4},
        {"scale": 0.1, "floor_size": 0},
        {"scale": 0.1, "floor_size": 4, "base": 2},
        0.1,
    ],
)
def test_bad_temperatures_name_the_field(value) -> None:
    with pytest.raises(ValueError, match=r"Config.query_temperature=.* is invalid: expected None or \{\"scale\""):
        config("rope", "decoder", query_temperature=value)
