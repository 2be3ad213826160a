"""Olmo 3 against transformers 4.57.6: local layers (a sliding window of 4, RoPE without scaling) and global ones
(RoPE with linear scaling), RMSNorm on each sub-layer's output, QK-norm over the whole q and k projections; at
inputs shorter and longer than the window and than max_position_embeddings; a round trip; greedy generation equal
to HF's."""

from __future__ import annotations

import copy  # transformers 5 edits a config's rope_scaling dict in place: give it copies

import pytest
import torch
from transformers import Olmo3Config, Olmo3ForCausalLM, Olmo3Model

import posformer as pf
from hf_oracle import check_family, padded_batch, save_hf
from posformer.hf.olmo3 import config_to_hf

LOCAL, GLOBAL = "sliding_attention", "full_attention"
SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=16,
    initializer_range=0.2,
    rope_theta=100.0,
    rope_scaling={"rope_type": "linear", "factor": 4.0},
    sliding_window=4,
    layer_types=[LOCAL, GLOBAL, LOCAL, GLOBAL],
)


@torch.no_grad()
def _olmo3(model_class=Olmo3ForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(Olmo3Config(**copy.deepcopy({**SIZES, **changes}), attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts every norm weight at one; make a swapped one show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    return hf


@pytest.mark.parametrize("length", [11, 40], ids=["short", "long"])
def test_against_hf_olmo3_local_and_global_layers(tmp_path, length):
    model = check_family(_olmo3(), Olmo3ForCausalLM, tmp_path, padded_batch(97, length=length))
    layers = zip(model.cfg.layer_configs(4), model.decoder.layers)
    found = [(layer.sliding_window, block.attn.position.params["scaling"]) for layer, block in layers]
    linear = {"type": "linear", "factor": 4.0}
    assert found == [(4, None), (None, linear), (4, None), (None, linear)]
    attn = model.decoder.layers[0].attn
    assert (attn.q_norm.weight.shape, attn.k_norm.weight.shape) == ((32,), (16,))


def test_against_hf_olmo3_biases_own_head_dim_and_tied_embeddings(tmp_path):
    """attention_bias on q/k/v/o, head_dim 16 with hidden 32 / 4 heads (q_norm over 64 features), a tied head."""
    hf = _olmo3(attention_bias=True, head_dim=16, tie_word_embeddings=True)
    model = check_family(hf, Olmo3ForCausalLM, tmp_path, padded_batch(97, length=24))
    assert model.cfg.head_dim == 16 and model.cfg.tie_embeddings
    assert model.decoder.layers[0].attn.q_norm.weight.shape == (64,)


def test_against_hf_olmo3_default_pattern_base_model(tmp_path):
    """No layer_types: every 4th layer is global; the base model's hidden states."""
    hf = _olmo3(Olmo3Model, layer_types=None, rope_scaling=None)
    model = check_family(hf, Olmo3Model, tmp_path, padded_batch(97, length=20), field="last_hidden_state")
    assert [layer.sliding_window for layer in model.cfg.layer_configs(4)] == [4, 4, 4, None]


def test_olmo3_generates_hf_tokens_at_short_and_long_inputs(tmp_path):
    hf = _olmo3()
    model = pf.from_hf(save_hf(hf, tmp_path))
    for length in (6, 24):
        batch = {key: value[[0, 2]] for key, value in padded_batch(97, length=length).items()}  # full, left-padded
        expected = hf.generate(**batch, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert torch.equal(model.generate(**batch, max_new_tokens=8, eos_token_id=[]), expected), length


def test_olmo3_writes_its_own_fields_back(tmp_path):
    model = pf.from_hf(save_hf(_olmo3(), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["sliding_window"], hf["layer_types"], hf["rope_theta"]) == (4, SIZES["layer_types"], 100.0)
    assert hf["rope_scaling"] == {"rope_type": "linear", "factor": 4.0} and not hf["tie_word_embeddings"]


@pytest.mark.parametrize(
    "change", [{"qk_norm_over": "head"}, {"norm_placement": "sandwich"}], ids=lambda c: next(iter(c))
)
def test_olmo3_export_refuses_another_layout_by_field(tmp_path, change):
    model = pf.from_hf(save_hf(_olmo3(), tmp_path / "hf"))
    other = pf.Transformer(model.cfg.replace(**change))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=f"Config.{next(iter(change))}="):
        pf.to_hf(other, tmp_path / "out")


@pytest.mark.parametrize("feature", [{"hidden_act": "gelu_new"}, {"sliding_window": None}], ids=lambda f: next(iter(f)))
def test_unsupported_olmo3_features_are_refused_by_name(tmp_path, feature):
    _olmo3(**feature).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=next(iter(feature))):
        pf.from_hf(tmp_path)
