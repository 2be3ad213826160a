"""Cohere2 against transformers 4.57.6: local layers (interleaved RoPE, a sliding window of 4) and global NoPE
layers, parallel blocks around one LayerNorm without bias, `logit_scale`, tied embeddings; at inputs shorter and
longer than the window and than max_position_embeddings; a round trip; greedy generation equal to HF's."""

from __future__ import annotations

import pytest
import torch
from transformers import Cohere2Config, Cohere2ForCausalLM, Cohere2Model

import posformer as pf
from hf_oracle import TOLERANCE, assert_generates_hf_tokens, assert_to_hf_refuses, check_family, padded_batch, save_hf
from posformer.hf.cohere2 import config_to_hf

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
    sliding_window=4,
    logit_scale=0.25,
    layer_types=[LOCAL, GLOBAL, LOCAL, GLOBAL],
)


@torch.no_grad()
def _cohere2(model_class=Cohere2ForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(Cohere2Config(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts every norm weight at one; make a swapped one show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    return hf


@pytest.mark.parametrize("length", [11, 40], ids=["short", "long"])
def test_against_hf_cohere2_local_and_global_layers(tmp_path, length):
    model = check_family(_cohere2(), Cohere2ForCausalLM, tmp_path, padded_batch(97, length=length))
    found = [(block.reach.window, block.attn.position.name) for block in model.decoder.layers]
    assert found == [(4, "rope"), (None, "none"), (4, "rope"), (None, "none")]
    assert model.cfg.position_params["layout"] == "interleaved" and model.cfg.logit_scale == 0.25


def test_against_hf_cohere2_biases_scaling_and_own_head_dim(tmp_path):
    """attention_bias on q/k/v/o, linear RoPE scaling, head_dim 16 with hidden 32 / 4 heads, an untied head."""
    hf = _cohere2(
        attention_bias=True,
        rope_scaling={"rope_type": "linear", "factor": 4.0},
        head_dim=16,
        tie_word_embeddings=False,
    )
    model = check_family(hf, Cohere2ForCausalLM, tmp_path, padded_batch(97, length=24))
    assert model.cfg.head_dim == 16 and not model.cfg.tie_embeddings


def test_against_hf_cohere2_default_pattern_base_model(tmp_path):
    """No layer_types: every 4th layer is global; the base model's hidden states (no logit scale)."""
    hf = _cohere2(Cohere2Model, layer_types=None)
    model = check_family(hf, Cohere2Model, tmp_path, padded_batch(97, length=20), field="last_hidden_state")
    assert [block.reach.window for block in model.decoder.layers] == [4, 4, 4, None]


def test_cohere2_generates_hf_tokens_at_short_and_long_inputs(tmp_path):
    hf = _cohere2()
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert_generates_hf_tokens(model, hf, 97, lengths=(6, 24))


@torch.no_grad()
def test_cohere2_loss_alone_scales_the_logits_too(tmp_path):
    model = pf.from_hf(save_hf(_cohere2(), tmp_path))
    ids = padded_batch(97)["input_ids"]
    full = model(input_ids=ids, labels=ids).loss
    alone = model(input_ids=ids, labels=ids, return_logits=False).loss
    assert abs(float(full - alone)) <= TOLERANCE


def test_cohere2_writes_its_own_fields_back(tmp_path):
    model = pf.from_hf(save_hf(_cohere2(), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["logit_scale"], hf["sliding_window"], hf["layer_types"]) == (0.25, 4, SIZES["layer_types"])
    assert hf["tie_word_embeddings"] and hf["rope_theta"] == 100.0


def test_cohere2_refuses_two_different_norms_in_a_layer(tmp_path):
    model = pf.from_hf(save_hf(_cohere2(), tmp_path / "hf"))
    with torch.no_grad():
        model.decoder.layers[1].ffn_res.norm.weight.add_(0.1)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="layer 1: different norms"):
        pf.to_hf(model, tmp_path / "out")


@pytest.mark.parametrize("feature", [{"hidden_act": "gelu_new"}, {"sliding_window": None}], ids=lambda f: next(iter(f)))
def test_unsupported_cohere2_features_are_refused_by_name(tmp_path, feature):
    _cohere2(**feature).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=next(iter(feature))):
        pf.from_hf(tmp_path)


def test_a_logit_scale_is_refused_by_families_without_one(tmp_path):
    cfg = pf.Config(
        vocab_size=97, d_model=32, n_layers=1, n_heads=4, position="rope", norm="rmsnorm", activation="swiglu"
    )
    model = pf.Transformer(cfg.replace(logit_scale=0.5, hf_model_type="llama"))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="logit_scale=0.5"):
        pf.to_hf(model, tmp_path)
    with pytest.raises(ValueError, match="logit_scale"):
        cfg.replace(logit_scale=0.5, head_bias=True)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"embed_norm": True}, "embed_norm=True"),
        ({"scale_embeddings": True}, "scale_embeddings=True"),
        ({"scale_tied_head": True, "tie_embeddings": True}, "scale_tied_head=True"),
        ({"type_vocab_size": 2}, "type_vocab_size=2"),
        ({"head": "masked_lm"}, "'masked_lm'"),
        ({"attn_scale": 0.3}, "attention scale other than head_dim"),
    ],
)
def test_to_hf_refuses_what_cohere2_cannot_express(tmp_path, changes, name):
    """Fields Cohere2Config has no key for: transformers would build the model without them."""
    cfg = pf.from_hf(save_hf(_cohere2(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
