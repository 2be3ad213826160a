"""Gemma 4 (text, `gemma4_text`) against transformers 5.x: local layers (a sliding window, RoPE base 10) and
global ones (a wider head from `global_head_dim`, proportional p-RoPE with a linear factor), per-layer inputs,
KV-shared last layers with double-wide FFNs, values normalised per head, layer scalars and soft-capped logits; at
an input within the window and one past it; a round trip; greedy generation equal to HF's; values from the keys
(`attention_k_eq_v`) with their own KV heads; the refused features named. transformers 4.57.6 has no Gemma 4:
there the module is skipped."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers.models.gemma4", reason="this transformers has no Gemma 4 (5.x has)")

from transformers import Gemma4ForCausalLM, Gemma4TextConfig, Gemma4TextModel  # noqa: E402

import posformer as pf  # noqa: E402
from hf_oracle import assert_generates_hf_tokens, assert_to_hf_refuses, check_family, padded_batch, save_hf  # noqa: E402

LOCAL, GLOBAL = "sliding_attention", "full_attention"
SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    global_head_dim=16,
    max_position_embeddings=64,
    initializer_range=0.2,
    sliding_window=8,
    layer_types=[LOCAL, GLOBAL, LOCAL, GLOBAL, LOCAL, GLOBAL],
    rope_parameters={
        LOCAL: {"rope_type": "default", "rope_theta": 10.0},
        GLOBAL: {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 1e4, "factor": 2.0},
    },
    hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=97,
    num_kv_shared_layers=2,
    use_double_wide_mlp=True,
    final_logit_softcapping=5.0,
)


@torch.no_grad()
def _gemma4(model_class=Gemma4ForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(Gemma4TextConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts every norm weight at one; make a swapped one show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    for name, buffer in hf.named_buffers():
        if name.endswith("layer_scalar"):
            buffer.uniform_(0.5, 1.5)
    return hf


@pytest.mark.parametrize("length", [7, 30], ids=["within_window", "past_window"])
def test_against_hf_gemma4_per_layer_inputs_and_shared_kv(tmp_path, length):
    model = check_family(_gemma4(), Gemma4ForCausalLM, tmp_path, padded_batch(97, length=length))
    cfg = model.cfg
    assert cfg.kv_sources == [None, None, None, None, 2, 3]
    layers = [(block.reach.window, block.attn.head_dim, block.ffn.d_ff) for block in model.decoder.layers]
    assert layers == [(8, 8, 40), (None, 16, 40)] * 2 + [(8, 8, 80), (None, 16, 80)]
    assert model.decoder.layers[1].attn.position.params["frequency_fraction"] == 0.5


def test_against_hf_gemma4_base_model_default_pattern(tmp_path):
    """No layer_types: every 6th layer global (the last one always); no per-layer inputs, no KV sharing; the base
    model's hidden states."""
    changes = dict(layer_types=None, hidden_size_per_layer_input=0, num_kv_shared_layers=0)
    hf = _gemma4(Gemma4TextModel, num_hidden_layers=4, **changes)
    model = check_family(hf, Gemma4TextModel, tmp_path, padded_batch(97, length=20), field="last_hidden_state")
    assert [block.reach.window for block in model.decoder.layers] == [8, 8, 8, None]
    assert model.cfg.per_layer_inputs is None and model.cfg.kv_sources is None


def test_against_hf_gemma4_values_from_keys(tmp_path):
    """attention_k_eq_v: the global layers have no value projection and one KV head of their own."""
    hf = _gemma4(attention_k_eq_v=True, num_global_key_value_heads=1)
    model = check_family(hf, Gemma4ForCausalLM, tmp_path, padded_batch(97, length=20))
    assert [block.attn.n_kv_heads for block in model.decoder.layers[:4]] == [2, 1, 2, 1]
    assert model.decoder.layers[1].attn.qkv_sizes == (64, 16, 0)


def test_gemma4_generates_hf_tokens_at_short_and_long_inputs(tmp_path):
    hf = _gemma4()
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert_generates_hf_tokens(model, hf, 97, lengths=(6, 24))


def test_gemma4_writes_its_own_fields_back(tmp_path):
    hf = pf.hf.gemma4.config_to_hf(pf.from_hf(save_hf(_gemma4(), tmp_path)).cfg)
    assert (hf["head_dim"], hf["per_layer_config"]) == (8, {str(i): {"head_dim": 16} for i in (1, 3, 5)})
    assert (hf["num_kv_shared_layers"], hf["use_double_wide_mlp"], hf["intermediate_size"]) == (2, True, 40)
    assert (hf["hidden_size_per_layer_input"], hf["final_logit_softcapping"]) == (8, 5.0)
    assert hf["layer_types"] == SIZES["layer_types"] and hf["rope_parameters"] == SIZES["rope_parameters"]


@pytest.mark.parametrize(
    "feature",
    [
        {"enable_moe_block": True},
        {"use_bidirectional_attention": "all"},
        {"per_layer_config": {"1": {"intermediate_size": 80}}},
        {"num_kv_shared_layers": 6},
    ],
    ids=lambda f: next(iter(f)),
)
def test_unsupported_gemma4_features_are_refused_by_name(tmp_path, feature):
    save_hf(_gemma4(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **feature}))
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
    ],
)
def test_to_hf_refuses_what_gemma4_cannot_express(tmp_path, changes, name):
    """Fields Gemma4TextConfig has no key for: transformers would build the model without them."""
    cfg = pf.from_hf(save_hf(_gemma4(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
