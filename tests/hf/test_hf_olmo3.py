"""Olmo 3 against transformers 4.57.6 and 5: local layers (a sliding window of 4, RoPE without scaling) and global
ones (RoPE with linear scaling), RMSNorm on each sub-layer's output, QK-norm over the whole q and k projections; at
inputs shorter and longer than the window and than max_position_embeddings; a round trip; greedy generation equal
to HF's; the sliding layers' RoPE in each version's form (5 gives them a RoPE of their own)."""

from __future__ import annotations

import copy  # transformers 5 edits a config's rope_scaling dict in place: give it copies
import json

import pytest
import torch
from transformers import Olmo3Config, Olmo3ForCausalLM, Olmo3Model

import posformer as pf
from hf_oracle import (
    TRANSFORMERS_5,
    assert_generates_hf_tokens,
    assert_same_outputs,
    check_family,
    padded_batch,
    save_hf,
)
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


def _olmo3_one_theta():
    """`_olmo3()` whose sliding layers rotate with the global theta unscaled, as transformers 4 builds it (5, from
    v4's keys, gives them its default theta: here they get their own `rope_parameters` entry)."""
    if not TRANSFORMERS_5:
        return _olmo3()
    rope = {"rope_type": "linear", "factor": 4.0, "rope_theta": 100.0}
    return _olmo3(
        rope_theta=None,
        rope_scaling=None,
        rope_parameters={GLOBAL: rope, LOCAL: {"rope_type": "default", "rope_theta": 100.0}},
    )


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
    assert_generates_hf_tokens(model, hf, 97, lengths=(6, 24))


def test_olmo3_writes_its_own_fields_back(tmp_path):
    """One RoPE with v4's keys where the sliding layers rotate with the global theta unscaled (transformers 4's
    model); under transformers 5, whose sliding layers got its default theta, their own RoPE keyed by layer type."""
    model = pf.from_hf(save_hf(_olmo3(), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["sliding_window"], hf["layer_types"], hf["max_position_embeddings"]) == (4, SIZES["layer_types"], 16)
    assert not hf["tie_word_embeddings"]
    linear = {"rope_type": "linear", "factor": 4.0}
    if TRANSFORMERS_5:
        local = {"rope_type": "default", "rope_theta": 500000.0}
        assert hf["rope_parameters"] == {GLOBAL: {**linear, "rope_theta": 100.0}, LOCAL: local}
        assert "rope_theta" not in hf and "rope_scaling" not in hf
    else:
        assert (hf["rope_theta"], hf["rope_scaling"]) == (100.0, linear) and "rope_parameters" not in hf


@pytest.mark.parametrize("version", ["4.57.6", "5.24.0"])
def test_olmo3_exports_for_each_version_in_its_form(tmp_path, version):
    """A model whose sliding layers rotate with the global theta unscaled, as transformers 4 builds it: v4's keys
    for 4; for 5 `rope_parameters` keyed by layer type, the sliding entry that theta (5 would give v4's keys' sliding
    layers its default 500000); both read back as the same model, and the installed transformers loads its own."""
    rope = {"rope_type": "linear", "factor": 4.0, "rope_theta": 100.0}
    model = pf.from_hf(save_hf(_olmo3_one_theta(), tmp_path / "hf"))
    assert model.cfg.layer_configs(4)[0].position_params["theta"] == 100.0
    pf.to_hf(model, tmp_path / "out", transformers_version=version)
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    if version.startswith("5"):
        assert written["rope_parameters"] == {GLOBAL: rope, LOCAL: {"rope_type": "default", "rope_theta": 100.0}}
        assert "rope_theta" not in written and "rope_scaling" not in written
    else:
        assert (written["rope_theta"], written["rope_scaling"]) == (100.0, {"rope_type": "linear", "factor": 4.0})
    assert pf.from_hf(tmp_path / "out").cfg == model.cfg
    if version.startswith("5") == TRANSFORMERS_5:
        reloaded = Olmo3ForCausalLM.from_pretrained(tmp_path / "out", attn_implementation="eager").eval()
        assert_same_outputs(model, reloaded, padded_batch(97, length=24))


def test_olmo3_export_for_transformers_4_refuses_a_sliding_rope_of_its_own(tmp_path):
    """Sliding layers with a theta of their own (as transformers 5 builds v4-style arguments: its default 500000)
    cannot be written for transformers 4, which rotates them with the global theta."""
    model = pf.from_hf(save_hf(_olmo3(), tmp_path / "hf"))
    local = {**model.cfg.position_params, "theta": 500000.0, "scaling": None}
    layer = {**model.cfg.layer_settings[LOCAL], "position_params": local}
    own = pf.Transformer(model.cfg.replace(layer_settings={LOCAL: layer}))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="for transformers 4.*transformers_version='5"):
        pf.to_hf(own, tmp_path / "out", transformers_version="4.57.6")
    pf.to_hf(own, tmp_path / "out5", transformers_version="5.24.0")
    assert pf.from_hf(tmp_path / "out5").cfg == own.cfg


@pytest.mark.parametrize("writer, theta", [("4.57.6", 100.0), ("5.24.0", 500000.0), (None, 100.0)])
def test_olmo3_reads_v4_keys_as_their_writer_meant(tmp_path, writer, theta):
    """`rope_theta` with no `rope_parameters`: transformers 4 rotates the sliding layers with it, 5 with its default
    theta; a flat `rope_parameters` from 5 (which 5 ignores for Olmo 3) is refused by name."""
    pf.to_hf(pf.from_hf(save_hf(_olmo3_one_theta(), tmp_path / "hf")), tmp_path / "v4", transformers_version="4.57.6")
    path = tmp_path / "v4" / "config.json"
    written = json.loads(path.read_text())
    written.pop("transformers_version")
    path.write_text(json.dumps({**written, **({"transformers_version": writer} if writer else {})}))
    assert pf.from_hf(tmp_path / "v4").cfg.layer_configs(4)[0].position_params["theta"] == theta
    flat = {k: v for k, v in written.items() if k not in ("rope_theta", "rope_scaling")}
    path.write_text(json.dumps({**flat, "rope_parameters": {"rope_theta": 100.0}, "transformers_version": "5.24.0"}))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="rope_parameters=.*not keyed by layer type"):
        pf.from_hf(tmp_path / "v4")


def test_olmo3_export_refuses_an_attention_scale_of_its_own(tmp_path):
    """Olmo3Config has no attention scale: HF's Olmo 3 always uses head_dim ** -0.5."""
    model = pf.from_hf(save_hf(_olmo3(), tmp_path / "hf"))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="attention scale other than head_dim"):
        pf.to_hf(pf.Transformer(model.cfg.replace(attn_scale=0.3)), tmp_path / "out")


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
