"""Gemma 3 (text) against transformers 4.57.6: local layers (a sliding window, RoPE base 10k) and global ones
(RoPE base 1M with linear scaling), unit-offset RMSNorm around attention and the FFN and over q and k, scaled
embeddings and `query_pre_attn_scalar`; at inputs shorter and longer than the window and than
max_position_embeddings; a round trip; greedy generation equal to HF's."""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, Gemma3TextModel

import posformer as pf
from hf_oracle import assert_generates_hf_tokens, assert_to_hf_refuses, check_family, padded_batch, save_hf
from posformer.hf.gemma3 import config_to_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=16,
    initializer_range=0.2,
    query_pre_attn_scalar=16,
    sliding_window=4,
    rope_theta=1e6,
    rope_local_base_freq=10.0,
    rope_scaling={"rope_type": "linear", "factor": 8.0},
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
)


@torch.no_grad()
def _gemma3(model_class=Gemma3ForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(Gemma3TextConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts every norm weight at zero; make a swapped one show
        if "norm" in name:
            param.normal_(0.0, 0.5)
    return hf


@pytest.mark.parametrize("length", [11, 40], ids=["short", "long"])
def test_against_hf_gemma3_local_and_global_layers(tmp_path, length):
    model = check_family(_gemma3(), Gemma3ForCausalLM, tmp_path, padded_batch(97, length=length))
    found = [(block.reach.window, block.attn.position.params["theta"]) for block in model.decoder.layers]
    assert found == [(4, 10.0), (None, 1e6), (4, 10.0), (None, 1e6)]
    assert model.decoder.layers[1].attn.position.params["scaling"] == {"type": "linear", "factor": 8.0}


def test_against_hf_gemma3_default_pattern_base_model(tmp_path):
    """No layer_types: every 6th layer is global (here: 1 of 6); the base model's hidden states."""
    hf = _gemma3(Gemma3TextModel, num_hidden_layers=6, layer_types=None, rope_scaling=None)
    model = check_family(hf, Gemma3TextModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert [block.reach.window for block in model.decoder.layers] == [4] * 5 + [None]


def test_gemma3_generates_hf_tokens_at_short_and_long_inputs(tmp_path):
    hf = _gemma3()
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert_generates_hf_tokens(model, hf, 97, lengths=(6, 24))


def test_gemma3_writes_its_own_fields_back(tmp_path):
    model = pf.from_hf(save_hf(_gemma3(), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["query_pre_attn_scalar"], hf["sliding_window"], hf["rope_local_base_freq"]) == (16, 4, 10.0)
    assert hf["layer_types"] == SIZES["layer_types"]


@pytest.mark.parametrize(
    "feature",
    [{"final_logit_softcapping": 30.0}, {"attn_logit_softcapping": 50.0}, {"use_bidirectional_attention": True}],
    ids=lambda f: next(iter(f)),
)
def test_unsupported_gemma3_features_are_refused_by_name(tmp_path, feature):
    _gemma3(**feature).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=next(iter(feature))):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"embed_norm": True}, "embed_norm=True"),
        ({"head_bias": True}, "head_bias=True"),
        ({"head_transform": True}, "head_transform=True"),
        ({"scale_tied_head": True, "tie_embeddings": True}, "scale_tied_head=True"),
        ({"type_vocab_size": 2}, "type_vocab_size=2"),
        ({"head": "span_qa"}, "'span_qa'"),
        ({"query_temperature": {"scale": 0.1, "floor_size": 4}}, "query_temperature="),
    ],
)
def test_to_hf_refuses_what_gemma3_cannot_express(tmp_path, changes, name):
    """Fields Gemma3TextConfig has no key for: transformers would build the model without them."""
    cfg = pf.from_hf(save_hf(_gemma3(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
