"""Qwen3-Next (qwen3_next) against transformers 4.57.6 and 5.x: three gated DeltaNet layers and one gated attention
layer (partial RoPE, QK-norm with a unit offset) with experts and a gated shared expert; logits on a padded batch
at 11 tokens and at 150 (past two of the DeltaNet's chunks of 64), a round trip that writes the fused projections
back bit for bit, greedy generation equal to HF's; transformers 5's fused experts; multi-token prediction weights
left out as transformers leaves them; refusals by name."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM, Qwen3NextModel

import posformer as pf
from hf_oracle import (
    assert_generates_hf_tokens,
    assert_same_outputs,
    assert_to_hf_refuses,
    check_family,
    padded_batch,
    save_fused_experts,
    save_hf,
)

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=6,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=24,
    max_position_embeddings=256,
    rope_theta=100.0,
    initializer_range=0.2,
)
MIXED = ["full_attention", "linear_attention", "linear_attention", "full_attention"]


@torch.no_grad()
def _qwen3_next(model_class=Qwen3NextForCausalLM, **changes):
    """HF starts the zero-centred norms at 0, the gated norms at 1 and dt_bias at 1, and draws decays that forget
    a token at once (A_log = log U(0, 16)): make every one a random draw, with decays per token near 0.97, so that
    the state carries the tokens of one chunk into the next."""
    torch.manual_seed(0)
    hf = model_class(Qwen3NextConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():
        if name.endswith("A_log"):
            param.uniform_(-4.5, -3.0)
        elif name.endswith("dt_bias") or name.endswith("bias"):
            param.normal_(0.5 if name.endswith("dt_bias") else 0.0, 0.5)
        elif "norm" in name:
            param.normal_(1.0 if ".linear_attn.norm" in name else 0.0, 0.5)
    return hf


@pytest.mark.parametrize(
    "changes, length",
    [
        ({}, 11),
        ({}, 150),
        ({"attention_bias": True, "tie_word_embeddings": True, "norm_topk_prob": False, "mlp_only_layers": [1]}, 11),
        ({"num_experts": 0, "partial_rotary_factor": 1.0, "layer_types": MIXED}, 11),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}}, 80),
    ],
    ids=["default", "past-two-chunks", "biases-tied-unnormalised-dense-layer", "dense-full-rope-mixed", "yarn-long"],
)
def test_against_hf_qwen3_next(tmp_path, changes, length):
    model = check_family(_qwen3_next(**changes), Qwen3NextForCausalLM, tmp_path, padded_batch(97, length=length))
    cfg, hf = model.cfg, {**SIZES, **changes}
    kinds = hf.get("layer_types", ["linear_attention"] * 3 + ["full_attention"])
    assert [block.attn.__class__.__name__ for block in model.decoder.layers] == [
        "GatedDeltaNet" if kind == "linear_attention" else "SelfAttention" for kind in kinds
    ]
    assert [block.has_experts for block in model.decoder.layers] == [
        hf["num_experts"] > 0 and i not in hf.get("mlp_only_layers", []) for i in range(4)
    ]
    assert cfg.position_params.get("rotary_fraction", 1.0) == hf.get("partial_rotary_factor", 0.25)
    assert cfg.attention_output_gate and cfg.norm == "rmsnorm_unit_offset"
    assert cfg.shared_expert_gate == (hf["num_experts"] > 0)


def test_against_hf_qwen3_next_base_model(tmp_path):
    model = check_family(_qwen3_next(Qwen3NextModel), Qwen3NextModel, tmp_path, padded_batch(97), "last_hidden_state")
    assert model.head is None


def test_qwen3_next_generates_hf_tokens(tmp_path):
    """From a full and a left-padded prompt, with the cache (the DeltaNet's state and the attention's keys), at 6
    tokens and at 70 (past a chunk)."""
    hf = _qwen3_next(attention_bias=True)
    assert_generates_hf_tokens(pf.from_hf(save_hf(hf, tmp_path)), hf, 97, lengths=(6, 70))


def test_to_hf_writes_the_fused_projections_and_fields_back(tmp_path):
    """The exported in_proj_qkvz / in_proj_ba (fused by query/key head) are the checkpoint's own tensors bit for bit,
    and the config says what the model is."""
    hf = _qwen3_next(mlp_only_layers=[1], layer_types=MIXED)
    pf.to_hf(pf.from_hf(save_hf(hf, tmp_path / "hf")), tmp_path / "out")
    original, written = (
        load_file(tmp_path / "hf" / "model.safetensors"),
        load_file(tmp_path / "out" / "model.safetensors"),
    )
    assert sorted(written) == sorted(original)
    assert all(torch.equal(written[key], original[key]) for key in original if ".linear_attn.in_proj_" in key)
    out = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (out["layer_types"], out["mlp_only_layers"], out["partial_rotary_factor"]) == (MIXED, [1], 0.25)
    assert (out["num_experts"], out["shared_expert_intermediate_size"], out["moe_intermediate_size"]) == (8, 24, 16)
    assert (out["linear_num_key_heads"], out["linear_num_value_heads"], out["linear_value_head_dim"]) == (2, 4, 6)


def test_qwen3_next_reads_fused_experts(tmp_path):
    """transformers 5's layout (one gate_up_proj and one down_proj per expert layer), beside the router, the shared
    expert and its gate, checked to be 5's own state dict under 5."""
    hf = _qwen3_next()
    assert_same_outputs(pf.from_hf(save_fused_experts(hf, tmp_path)), hf, padded_batch(97))


def test_qwen3_next_leaves_out_mtp_weights_as_hf_does(tmp_path):
    """Published checkpoints store a multi-token prediction module under `mtp.`; transformers loads them without it
    (`_keys_to_ignore_on_load_unexpected`), posformer too."""
    hf = _qwen3_next()
    save_hf(hf, tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    mtp = {"mtp.fc.weight": torch.randn(32, 64), "mtp.norm.weight": torch.randn(32)}
    save_file({**state, **mtp}, tmp_path / "model.safetensors")
    reloaded = Qwen3NextForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert_same_outputs(pf.from_hf(tmp_path), reloaded, padded_batch(97))


def _edited(tmp_path, **keys):
    save_hf(_qwen3_next(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **keys}))
    return tmp_path


@pytest.mark.parametrize(
    "keys, error, name",
    [
        ({"hidden_act": "gelu"}, pf.hf.UnsupportedCheckpoint, "hidden_act='gelu'"),
        ({"layer_types": ["linear_attention", "sliding_attention"] * 2}, pf.hf.UnsupportedCheckpoint, "layer_types"),
        ({"decoder_sparse_step": 0}, pf.hf.UnsupportedCheckpoint, "decoder_sparse_step=0"),
        ({"shared_expert_intermediate_size": 0}, pf.hf.UnsupportedCheckpoint, "shared_expert_intermediate_size=0"),
        ({"linear_num_key_heads": "2"}, ValueError, "linear_num_key_heads='2'"),
        ({"architectures": ["Qwen3NextForSequenceClassification"]}, pf.hf.UnsupportedCheckpoint, "architecture"),
    ],
    ids=lambda value: str(value),
)
def test_unsupported_qwen3_next_configs_are_refused_by_name(tmp_path, keys, error, name):
    with pytest.raises(error, match=name):
        pf.from_hf(_edited(tmp_path, **keys))


def test_unfused_projections_are_refused_by_name(tmp_path):
    """Qwen3.5's separate in_proj_qkv / in_proj_z / ... are not Qwen3-Next's layout: named, not guessed."""
    save_hf(_qwen3_next(), tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["model.layers.0.linear_attn.in_proj_z.weight"] = torch.randn(24, 32)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(pf.hf.WeightMapError, match=r"model\.layers\.0\.linear_attn\.in_proj_z\.weight"):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"attention_output_gate": False}, "attention_output_gate"),
        ({"shared_expert_gate": False}, "shared_expert_gate"),
        ({"norm": "rmsnorm"}, "norm"),
        ({"qk_norm": False}, "qk_norm"),
        ({"router_softmax": "top_k"}, "router_softmax"),
        ({"layer_settings": {"linear_attention": {"mixer": "attention"}}}, "layer_settings"),
        ({"position_params": {"theta": 100.0, "layout": "interleaved", "rotary_fraction": 0.25}}, "interleaved"),
    ],
)
def test_to_hf_refuses_what_qwen3_next_cannot_express(tmp_path, changes, name):
    assert_to_hf_refuses(pf.from_hf(save_hf(_qwen3_next(), tmp_path / "hf")).cfg, changes, name, tmp_path / "out")


@pytest.mark.parametrize("family", ["qwen3_moe", "glm4_moe", "llama4_text"])
def test_other_families_refuse_gated_deltanet_layers_and_gates(tmp_path, family):
    """Named as the model's own family (`Config.hf_model_type`), before the family's own checks."""
    cfg = pf.from_hf(save_hf(_qwen3_next(), tmp_path / "hf")).cfg
    changes = {"hf_model_type": family}
    assert_to_hf_refuses(cfg, changes, "attention_output_gate|mixer|shared_expert_gate", tmp_path / "out")
