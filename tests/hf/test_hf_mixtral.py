"""Mixtral against transformers 4.57.6 and 5: 4 experts, top-1 to top-3, with and without a sliding window, at inputs
shorter and longer than the window and than max_position_embeddings; the load-balancing loss and the training
loss with it; a round trip; transformers 5's fused experts; greedy generation equal to HF's; refusals by name."""

from __future__ import annotations

import pytest
import torch
from transformers import MixtralConfig, MixtralForCausalLM, MixtralModel

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
from posformer.hf.mixtral import config_to_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_local_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=32,
    initializer_range=0.2,
    rope_theta=100.0,
    router_aux_loss_coef=0.25,
)


@torch.no_grad()
def _mixtral(model_class=MixtralForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(MixtralConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts every norm weight at one; make a swapped one show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    return hf


@pytest.mark.parametrize(
    "changes, length",
    [
        ({}, 11),
        ({"sliding_window": 4}, 11),
        ({"sliding_window": 4}, 40),
        ({"num_experts_per_tok": 1, "head_dim": 16}, 11),
        ({"num_experts_per_tok": 3, "tie_word_embeddings": True}, 11),
    ],
    ids=["top2", "window-short", "window-long", "top1-head-dim", "top3-tied"],
)
def test_against_hf_mixtral(tmp_path, changes, length):
    model = check_family(_mixtral(**changes), MixtralForCausalLM, tmp_path, padded_batch(97, length=length))
    cfg = model.cfg
    assert (cfg.n_experts, cfg.experts_per_token) == (4, changes.get("num_experts_per_tok", 2)) and cfg.norm_topk_prob
    assert cfg.sliding_window == changes.get("sliding_window") and cfg.router_aux_loss_coef == 0.25


def test_against_hf_mixtral_base_model(tmp_path):
    model = check_family(_mixtral(MixtralModel), MixtralModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


def test_mixtral_reads_fused_experts(tmp_path):
    """transformers 5's layout: `mlp.gate`, one `mlp.experts.gate_up_proj` ([w1; w3]) and `down_proj` a layer."""
    hf = _mixtral()
    model = pf.from_hf(save_fused_experts(hf, tmp_path, "block_sparse_moe", ("w1", "w3", "w2")))
    assert_same_outputs(model, hf, padded_batch(97))


def test_mixtral_generates_hf_tokens(tmp_path):
    """From a full and a left-padded prompt, with the KV cache, and past a window of 4."""
    for changes, length in (({}, 6), ({"sliding_window": 4}, 9)):
        hf = _mixtral(**changes)
        assert_generates_hf_tokens(pf.from_hf(save_hf(hf, tmp_path / str(length))), hf, 97, lengths=(length,))


def test_mixtral_aux_loss_and_training_loss_are_hf_ones(tmp_path):
    """HF with output_router_logits: its aux_loss (over the real tokens of a padded batch), and in training mode
    its loss, the cross-entropy plus router_aux_loss_coef times the aux loss."""
    hf = _mixtral()
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = padded_batch(97)
    labels = causal_labels(batch)
    with torch.no_grad():
        ours, theirs = model(**batch, labels=labels), hf(**batch, labels=labels, output_router_logits=True)
        assert abs(float(ours.aux_loss - theirs.aux_loss)) <= TOLERANCE
        model.train(), hf.train()
        ours, theirs = model(**batch, labels=labels), hf(**batch, labels=labels, output_router_logits=True)
        assert abs(float(ours.loss - theirs.loss)) <= TOLERANCE
        assert float(ours.loss - model.eval()(**batch, labels=labels).loss) > 0


def test_mixtral_writes_its_own_fields_back(tmp_path):
    model = pf.from_hf(save_hf(_mixtral(sliding_window=4), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["num_local_experts"], hf["num_experts_per_tok"], hf["intermediate_size"]) == (4, 2, 40)
    assert (hf["sliding_window"], hf["router_aux_loss_coef"], hf["rope_theta"]) == (4, 0.25, 100.0)


@pytest.mark.parametrize(
    "feature", [{"hidden_act": "gelu_new"}, {"router_jitter_noise": 0.1}], ids=lambda f: next(iter(f))
)
def test_unsupported_mixtral_features_are_refused_by_name(tmp_path, feature):
    _mixtral(**feature).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=next(iter(feature))):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"norm_topk_prob": False}, "norm_topk_prob"),
        ({"moe_layers": [True, False]}, "moe_layers"),
        ({"qk_norm": True}, "qk_norm"),
        ({"hf_model_type": "llama"}, "n_experts"),
        ({"router_bias": True}, "router_bias=True"),
        ({"router_softmax": "top_k"}, "router_softmax='top_k'"),
        ({"expert_activation": "swiglu_clamped"}, "expert_activation='swiglu_clamped'"),
        ({"shared_expert_d_ff": 24}, "shared_expert_d_ff=24"),
    ],
)
def test_to_hf_refuses_what_mixtral_cannot_express(tmp_path, changes, name):
    model = pf.from_hf(save_hf(_mixtral(), tmp_path / "hf"))
    model = pf.Transformer(model.cfg.replace(**changes))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=name):
        pf.to_hf(model, tmp_path / "out")
