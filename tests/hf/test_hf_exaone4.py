"""EXAONE 4 against transformers 4.57.6: local layers (RoPE with llama3 scaling, a sliding window of 4) and global
NoPE layers, or every layer global with RoPE without a window; RMSNorm on each sub-layer's output, per-head
QK-norm; at inputs shorter and longer than the window and than max_position_embeddings; a round trip; greedy
generation equal to HF's."""

from __future__ import annotations

import copy  # transformers 5 edits a config's rope_scaling dict in place: give it copies
import json

import pytest
import torch
from transformers import Exaone4Config, Exaone4ForCausalLM, Exaone4Model

import posformer as pf
from hf_oracle import assert_generates_hf_tokens, check_family, padded_batch, save_hf
from posformer.hf.exaone4 import config_to_hf

LOCAL, GLOBAL = "sliding_attention", "full_attention"
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 4.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8,
}
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
    rope_scaling=LLAMA3,
    sliding_window=4,
    sliding_window_pattern="LLLG",  # as EXAONE 4.0 32B's config.json writes it, next to layer_types
    layer_types=[LOCAL, GLOBAL, LOCAL, GLOBAL],
)


@torch.no_grad()
def _exaone4(model_class=Exaone4ForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(Exaone4Config(**copy.deepcopy({**SIZES, **changes}), attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts every norm weight at one; make a swapped one show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    return hf


@pytest.mark.parametrize("length", [11, 40], ids=["short", "long"])
def test_against_hf_exaone4_local_and_global_layers(tmp_path, length):
    model = check_family(_exaone4(), Exaone4ForCausalLM, tmp_path, padded_batch(97, length=length))
    layers = zip(model.cfg.layer_configs(4), model.decoder.layers)
    found = [(layer.sliding_window, block.attn.position.name) for layer, block in layers]
    assert found == [(4, "rope"), (None, "none"), (4, "rope"), (None, "none")]
    assert model.cfg.position_params["scaling"]["type"] == "llama3"
    assert model.decoder.layers[0].attn.q_norm.weight.shape == (8,)


def test_against_hf_exaone4_without_a_window_every_layer_rotates(tmp_path):
    """sliding_window=None: every layer global with RoPE; the base model's hidden states, head_dim 16, tied."""
    hf = _exaone4(Exaone4Model, sliding_window=None, layer_types=[GLOBAL] * 4, head_dim=16, tie_word_embeddings=True)
    model = check_family(hf, Exaone4Model, tmp_path, padded_batch(97, length=24), field="last_hidden_state")
    assert model.cfg.layer_types is None and model.cfg.sliding_window is None and model.cfg.head_dim == 16
    assert {block.attn.position.name for block in model.decoder.layers} == {"rope"}


def test_against_hf_exaone4_default_pattern(tmp_path):
    """No layer_types: every `sliding_window_pattern`-th layer (here 2) is global."""
    hf = _exaone4(layer_types=None, sliding_window_pattern=2, rope_scaling=None)
    model = check_family(hf, Exaone4ForCausalLM, tmp_path, padded_batch(97, length=20))
    assert [layer.sliding_window for layer in model.cfg.layer_configs(4)] == [4, None, 4, None]


def test_exaone4_generates_hf_tokens_at_short_and_long_inputs(tmp_path):
    hf = _exaone4()
    assert_generates_hf_tokens(pf.from_hf(save_hf(hf, tmp_path)), hf, 97, lengths=(6, 24))


def test_exaone4_writes_its_own_fields_back(tmp_path):
    model = pf.from_hf(save_hf(_exaone4(), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["sliding_window"], hf["layer_types"], hf["rope_scaling"]) == (4, SIZES["layer_types"], LLAMA3)
    model = pf.from_hf(save_hf(_exaone4(sliding_window=None, layer_types=[GLOBAL] * 4), tmp_path / "plain"))
    assert (config_to_hf(model.cfg)["sliding_window"], config_to_hf(model.cfg)["layer_types"]) == (None, [GLOBAL] * 4)


def test_exaone4_export_refuses_qk_norm_over_the_projection(tmp_path):
    model = pf.from_hf(save_hf(_exaone4(), tmp_path / "hf"))
    other = pf.Transformer(model.cfg.replace(qk_norm_over="projection"))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="Config.qk_norm_over="):
        pf.to_hf(other, tmp_path / "out")


def test_a_string_pattern_without_layer_types_is_refused_by_name(tmp_path):
    save_hf(_exaone4(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="sliding_window_pattern='LLLG'"):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "feature",
    [{"hidden_act": "gelu_new"}, {"sliding_window": None}],
    ids=lambda f: next(iter(f)),
)
def test_unsupported_exaone4_features_are_refused_by_name(tmp_path, feature):
    """gelu_new; sliding layers (layer_types) without a window, which transformers cannot mask."""
    _exaone4(**feature).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=next(iter(feature))):
        pf.from_hf(tmp_path)


def test_exaone4_export_names_a_parallel_residual(tmp_path):
    """transformers' EXAONE 4 layer is sequential: the export names `parallel_residual` itself, not only through
    Config's own rule that a parallel residual is pre-norm (which refuses it with norm_placement "output" today)."""
    cfg = pf.from_hf(save_hf(_exaone4(), tmp_path)).cfg
    cfg.parallel_residual = True  # set past `Config.validate`, so that the family's own check is what answers
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="parallel_residual=True"):
        config_to_hf(cfg)
