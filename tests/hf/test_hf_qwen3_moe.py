"""Qwen3-MoE against transformers 4.57.6 and 5: 4 experts top-2 with and without `norm_topk_prob`, dense layers
among the expert ones (`mlp_only_layers`, `decoder_sparse_step`), per-head QK-norm, attention biases, a sliding
window; the load-balancing loss and the training loss with it; a round trip; transformers 5's fused experts and its
`num_local_experts`; greedy generation equal to HF's; refusals by name."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM, Qwen3MoeModel

import posformer as pf
from hf_oracle import (
    TOLERANCE,
    assert_generates_hf_tokens,
    assert_same_outputs,
    causal_labels,
    check_family,
    padded_batch,
    save_fused_experts,
    save_hf,
)
from posformer.hf.qwen3_moe import config_to_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    moe_intermediate_size=24,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=32,
    initializer_range=0.2,
    rope_theta=100.0,
    router_aux_loss_coef=0.25,
)


@torch.no_grad()
def _qwen3_moe(model_class=Qwen3MoeForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(Qwen3MoeConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts norm weights at one and biases at zero; make them show
        if "norm" in name or name.endswith("bias"):
            param.normal_(1.0 if "norm" in name else 0.0, 0.5)
    return hf


@pytest.mark.parametrize(
    "changes, length, experts",
    [
        ({}, 11, [True, True]),
        ({"norm_topk_prob": True, "attention_bias": True}, 11, [True, True]),
        ({"num_hidden_layers": 3, "mlp_only_layers": [1]}, 11, [True, False, True]),
        ({"num_hidden_layers": 4, "decoder_sparse_step": 2, "tie_word_embeddings": True}, 11, [False, True] * 2),
        ({"use_sliding_window": True, "sliding_window": 4}, 40, [True, True]),
    ],
    ids=["default", "norm-topk-biases", "mlp-only-layers", "sparse-step-tied", "window-long"],
)
def test_against_hf_qwen3_moe(tmp_path, changes, length, experts):
    model = check_family(_qwen3_moe(**changes), Qwen3MoeForCausalLM, tmp_path, padded_batch(97, length=length))
    cfg = model.cfg
    assert [block.has_experts for block in model.decoder.layers] == experts
    assert cfg.norm_topk_prob == changes.get("norm_topk_prob", False) and (cfg.d_ff, cfg.expert_ff_dim) == (48, 24)
    assert cfg.sliding_window == changes.get("sliding_window") and cfg.qk_norm


def test_against_hf_qwen3_moe_base_model(tmp_path):
    hf = _qwen3_moe(Qwen3MoeModel, num_hidden_layers=3, mlp_only_layers=[0])
    model = check_family(hf, Qwen3MoeModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


def test_qwen3_moe_reads_fused_experts(tmp_path):
    """transformers 5's layout (one gate_up_proj and one down_proj per expert layer), a dense layer between."""
    hf = _qwen3_moe(num_hidden_layers=3, mlp_only_layers=[1])
    model = pf.from_hf(save_fused_experts(hf, tmp_path, "mlp", ("gate_proj", "up_proj", "down_proj")))
    assert_same_outputs(model, hf, padded_batch(97))


@pytest.mark.parametrize("version, key", [("4.57.6", "num_experts"), ("5.24.0", "num_local_experts")])
def test_qwen3_moe_writes_the_number_of_experts_for_its_version(tmp_path, version, key):
    model = pf.from_hf(save_hf(_qwen3_moe(), tmp_path / "hf"))
    pf.to_hf(model, tmp_path / "out", transformers_version=version)
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    other = "num_local_experts" if key == "num_experts" else "num_experts"
    assert written[key] == 4 and other not in written
    assert pf.from_hf(tmp_path / "out").cfg == model.cfg


def test_qwen3_moe_generates_hf_tokens(tmp_path):
    """From a full and a left-padded prompt, with the KV cache, shorter and longer than max_position_embeddings."""
    hf = _qwen3_moe(num_hidden_layers=3, mlp_only_layers=[1])
    assert_generates_hf_tokens(pf.from_hf(save_hf(hf, tmp_path)), hf, 97, lengths=(6, 40))


def test_qwen3_moe_aux_loss_and_training_loss_are_hf_ones(tmp_path):
    """Over the expert layers only (a dense layer between them), on a padded batch."""
    hf = _qwen3_moe(num_hidden_layers=3, mlp_only_layers=[1])
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = padded_batch(97)
    labels = causal_labels(batch)
    with torch.no_grad():
        ours, theirs = model(**batch, labels=labels), hf(**batch, labels=labels, output_router_logits=True)
        assert abs(float(ours.aux_loss - theirs.aux_loss)) <= TOLERANCE
        model.train(), hf.train()
        ours, theirs = model(**batch, labels=labels), hf(**batch, labels=labels, output_router_logits=True)
        assert abs(float(ours.loss - theirs.loss)) <= TOLERANCE


def test_qwen3_moe_writes_its_own_fields_back(tmp_path):
    hf = _qwen3_moe(num_hidden_layers=4, decoder_sparse_step=2, norm_topk_prob=True)
    out = config_to_hf(pf.from_hf(save_hf(hf, tmp_path)).cfg)
    assert (out["mlp_only_layers"], out["decoder_sparse_step"], out["norm_topk_prob"]) == ([0, 2], 1, True)
    assert (out["num_experts"], out["moe_intermediate_size"], out["intermediate_size"]) == (4, 24, 48)
    assert (out["use_sliding_window"], out["sliding_window"], out["router_aux_loss_coef"]) == (False, None, 0.25)


@pytest.mark.parametrize(
    "feature, name",
    [
        ({"hidden_act": "gelu_new"}, "hidden_act"),
        ({"num_experts": 0}, "num_experts=0"),
        ({"mlp_only_layers": [0, 1]}, "mlp_only_layers"),
        ({"decoder_sparse_step": 3}, "decoder_sparse_step=3"),
    ],
    ids=lambda f: str(f),
)
def test_unsupported_qwen3_moe_features_are_refused_by_name(tmp_path, feature, name):
    """Each a model transformers builds (num_experts=0 and no expert layer: a dense one)."""
    _qwen3_moe(**feature).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=name):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"qk_norm": False}, "qk_norm"),
        ({"ffn_bias": True}, "ffn_bias"),
        ({"hf_model_type": "qwen3"}, "n_experts"),
        ({"router_bias": True}, "router_bias=True"),
        ({"router_softmax": "sigmoid_input"}, "router_softmax='sigmoid_input'"),
        ({"expert_activation": "swiglu_clamped"}, "expert_activation='swiglu_clamped'"),
        ({"shared_expert_d_ff": 24}, "shared_expert_d_ff=24"),
    ],
)
def test_to_hf_refuses_what_qwen3_moe_cannot_express(tmp_path, changes, name):
    model = pf.from_hf(save_hf(_qwen3_moe(), tmp_path / "hf"))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=name):
        pf.to_hf(pf.Transformer(model.cfg.replace(**changes)), tmp_path / "out")
