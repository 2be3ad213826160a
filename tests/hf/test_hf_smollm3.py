"""SmolLM3 against transformers 4.57.6: LLaMA's layout with NoPE layers (`no_rope_layers`, 1 = RoPE, 0 = NoPE),
optionally sliding windows on them, at inputs shorter and longer than max_position_embeddings; a round trip;
greedy generation equal to HF's."""

from __future__ import annotations

import pytest
import torch
from transformers import SmolLM3Config, SmolLM3ForCausalLM

import posformer as pf
from hf_oracle import assert_generates_hf_tokens, check_family, padded_batch, save_hf
from posformer.hf.llama import config_to_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=16,
    initializer_range=0.2,
    rope_theta=500.0,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)


def _smollm3(**changes) -> SmolLM3ForCausalLM:
    torch.manual_seed(0)
    return SmolLM3ForCausalLM(SmolLM3Config(**{**SIZES, **changes}, attn_implementation="eager")).eval()


@pytest.mark.parametrize("length", [11, 40], ids=["short", "long"])
def test_against_hf_smollm3_nope_every_fourth_layer(tmp_path, length):
    """The default: layer 3 (every 4th) has no RoPE."""
    model = check_family(_smollm3(), SmolLM3ForCausalLM, tmp_path, padded_batch(97, length=length))
    assert [block.attn.position.name for block in model.decoder.layers] == ["rope", "rope", "rope", "none"]


def test_against_hf_smollm3_explicit_nope_layers_with_windows(tmp_path):
    """no_rope_layers as a checkpoint lists them (layers 0 and 2 NoPE here), sliding a window of 4 on them."""
    hf = _smollm3(no_rope_layers=[0, 1, 0, 1], use_sliding_window=True, sliding_window=4)
    model = check_family(hf, SmolLM3ForCausalLM, tmp_path, padded_batch(97))
    found = [(block.attn.position.name, block.reach.window) for block in model.decoder.layers]
    assert found == [("none", 4), ("rope", None), ("none", 4), ("rope", None)]
    assert config_to_hf(model.cfg)["no_rope_layers"] == [0, 1, 0, 1]


def test_smollm3_generates_hf_tokens_at_short_and_long_inputs(tmp_path):
    hf = _smollm3(no_rope_layers=[1, 0, 1, 0])
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert_generates_hf_tokens(model, hf, 97, lengths=(6, 24))


def test_a_nope_layer_is_refused_by_families_without_them():
    cfg = pf.Config(
        arch="decoder",
        vocab_size=97,
        d_model=32,
        n_layers=2,
        n_heads=4,
        position="rope",
        norm="rmsnorm",
        activation="swiglu",
        layer_types=["full_attention", "b"],
        layer_settings={"b": {"position": "none"}},
        hf_model_type="llama",
    )
    with pytest.raises(ValueError, match="NoPE layers"):
        config_to_hf(cfg)
