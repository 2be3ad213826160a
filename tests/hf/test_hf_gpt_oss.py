"""GPT-OSS against transformers 4.57.6 and 5 (eager attention, as HF runs it on CPU): 4 experts top-2 with biases
and the clamped SwiGLU, learned sinks, a sliding layer (window 4) and a full one, with and without YaRN, on padded
batches shorter and longer than the window; the load-balancing loss (5's: over the router logits); greedy
generation equal to HF's; a round trip; refusals by name."""

from __future__ import annotations

import copy  # transformers 5 edits a config's rope_scaling dict in place: give it copies

import pytest
import torch
from torch.nn import functional as F
from transformers import GptOssConfig, GptOssForCausalLM, GptOssModel
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts, load_balancing_loss_func

import posformer as pf
from hf_oracle import (
    TOLERANCE,
    TRANSFORMERS_5,
    assert_generates_hf_tokens,
    causal_labels,
    check_family,
    padded_batch,
    save_hf,
)
from posformer.hf.gpt_oss import config_to_hf
from posformer.modules.moe import clamped_swiglu

SIZES = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_local_experts=4,
    num_experts_per_tok=2,
    sliding_window=4,
    layer_types=["sliding_attention", "full_attention"],
    max_position_embeddings=64,
    initializer_range=0.2,
    rope_theta=100.0,
    rope_scaling=None,
    router_aux_loss_coef=0.25,
)
YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 16,
}


@torch.no_grad()
def _gpt_oss(model_class=GptOssForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(GptOssConfig(**copy.deepcopy({**SIZES, **changes}), attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts norms at one and biases at zero; make a swap show
        if "norm" in name:
            param.normal_(1.0, 0.5)
        elif name.endswith("bias"):
            param.normal_(0.0, 0.2)
        elif name.endswith("gate_up_proj"):  # large enough that the gate and up clamps at 7 act
            param.normal_(0.0, 0.6)
    return hf


def test_clamped_swiglu_is_gpt_oss_expert_unit():
    """One HF expert with identity-like projections shows its unit: gate and up are the interleaved columns."""
    experts = GptOssExperts(GptOssConfig(hidden_size=8, intermediate_size=4, num_local_experts=1))
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.eye(8)[None])
        experts.gate_up_proj_bias.zero_()
        experts.down_proj.copy_(torch.eye(4, 8)[None])
        experts.down_proj_bias.zero_()
    x = torch.linspace(-20.0, 20.0, 8 * 16).view(16, 8)
    route = (torch.zeros(16, 1, dtype=torch.long), torch.ones(16, 1))  # every token to expert 0, weight 1
    theirs = (experts(x, *route) if TRANSFORMERS_5 else experts(x[None], *route)[0])[:, :4]  # 5 takes flat tokens
    assert torch.allclose(clamped_swiglu(x[:, ::2], x[:, 1::2]), theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "changes, length",
    [({}, 11), ({}, 40), ({"rope_scaling": YARN}, 40), ({"tie_word_embeddings": True, "num_experts_per_tok": 1}, 11)],
    ids=["short", "beyond-window", "yarn", "tied-top1"],
)
def test_against_hf_gpt_oss(tmp_path, changes, length):
    model = check_family(_gpt_oss(**changes), GptOssForCausalLM, tmp_path, padded_batch(97, length=length))
    cfg = model.cfg
    assert cfg.attention_sinks and cfg.router_bias and cfg.ffn_bias and cfg.qkv_bias and cfg.attn_out_bias
    assert (cfg.router_softmax, cfg.expert_activation) == ("top_k", "swiglu_clamped")
    assert cfg.layer_configs(2)[0].sliding_window == 4 and cfg.layer_configs(2)[1].sliding_window is None
    assert (cfg.position_params.get("scaling") or {}).get("truncate", False) is False


def test_against_hf_gpt_oss_base_model(tmp_path):
    model = check_family(_gpt_oss(GptOssModel), GptOssModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


def test_gpt_oss_generates_hf_tokens(tmp_path):
    """From a full and a left-padded prompt, with the KV cache, past the window of 4."""
    hf = _gpt_oss(rope_scaling=YARN)
    assert_generates_hf_tokens(pf.from_hf(save_hf(hf, tmp_path)), hf, 97, lengths=(9,))


def _switch_loss_of_router_logits(hf, batch: dict, out) -> torch.Tensor:
    """HF's load-balancing loss over its routers' logits (with their bias), as transformers 5 records them: its
    own aux_loss there. transformers 4.57.6 records the sparse routing scores (a token's top-k softmax at its
    experts, zero elsewhere) and its aux_loss takes a second softmax of those, nearly uniform; here its own
    `load_balancing_loss_func` gets the logits of its routers, caught at their inputs."""
    if TRANSFORMERS_5:
        return out.aux_loss
    inputs = []
    hooks = [layer.mlp.router.register_forward_hook(lambda m, a, o: inputs.append(a[0])) for layer in hf.model.layers]
    try:
        recorded = hf(**batch, output_router_logits=True).router_logits
    finally:
        for hook in hooks:
            hook.remove()
    routers = [layer.mlp.router for layer in hf.model.layers]
    logits = tuple(F.linear(x.reshape(-1, r.weight.shape[1]), r.weight, r.bias) for x, r in zip(inputs, routers))
    k = hf.config.num_experts_per_tok
    scores = torch.softmax(torch.stack(logits).topk(k).values, -1)
    assert torch.allclose(torch.stack(recorded).topk(k).values, scores)  # what 4.57.6 records instead
    assert torch.allclose(torch.stack(recorded).sum(-1), torch.ones(()))
    return load_balancing_loss_func(logits, hf.config.num_local_experts, k, batch["attention_mask"])


def test_gpt_oss_aux_loss_and_training_loss_are_hf_ones(tmp_path):
    """The Switch load-balancing loss over the softmax of HF's router logits (real tokens of a padded batch only):
    transformers 5's aux_loss; in training mode HF's loss with router_aux_loss_coef times it."""
    hf = _gpt_oss()
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = padded_batch(97)
    labels = causal_labels(batch)
    coef = hf.config.router_aux_loss_coef
    with torch.no_grad():
        ours, theirs = model(**batch, labels=labels), hf(**batch, labels=labels, output_router_logits=True)
        expected = _switch_loss_of_router_logits(hf, batch, theirs)
        assert abs(float(ours.aux_loss - expected)) <= TOLERANCE
        model.train(), hf.train()
        ours, theirs = model(**batch, labels=labels), hf(**batch, labels=labels, output_router_logits=True)
        expected = theirs.loss + coef * (_switch_loss_of_router_logits(hf, batch, theirs) - theirs.aux_loss)
        assert abs(float(ours.loss - expected)) <= TOLERANCE


def test_gpt_oss_reads_transformers_defaults():
    """A config.json without rope_scaling (save_pretrained leaves out the default) is YaRN 32 over 4096."""
    cfg = pf.hf.family.family_for("gpt_oss", "test").config_from_hf({"model_type": "gpt_oss", "num_hidden_layers": 4})
    assert cfg.position_params["scaling"] == {
        "type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "original_max_position_embeddings": 4096,
    }
    assert cfg.position_params["theta"] == 150000.0 and not cfg.tie_embeddings and cfg.router_aux_loss_coef == 0.9
    assert [c.sliding_window for c in cfg.layer_configs(4)] == [128, None, 128, None]
    assert (cfg.head_dim, cfg.n_experts, cfg.experts_per_token) == (64, 128, 4)


def test_gpt_oss_writes_its_own_fields_back(tmp_path):
    model = pf.from_hf(save_hf(_gpt_oss(rope_scaling=YARN), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["num_local_experts"], hf["num_experts_per_tok"], hf["intermediate_size"]) == (4, 2, 40)
    assert (hf["layer_types"], hf["sliding_window"]) == (SIZES["layer_types"], 4)
    assert hf["rope_scaling"] == YARN and hf["router_aux_loss_coef"] == 0.25 and hf["attention_bias"] is True


@pytest.mark.parametrize(
    "feature",
    [{"swiglu_limit": 10.0}, {"layer_types": ["sliding_attention", "chunked_attention"]}, {"sliding_window": None}],
    ids=lambda f: next(iter(f)),
)
def test_unsupported_gpt_oss_features_are_refused_by_name(feature):
    hf = {"model_type": "gpt_oss", **SIZES, **feature}
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=next(iter(feature))):
        pf.hf.family.family_for("gpt_oss", "test").config_from_hf(hf)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"router_softmax": "all"}, "router_softmax"),
        ({"expert_activation": None}, "expert_activation"),
        ({"attention_sinks": False}, "attention_sinks"),
        ({"moe_layers": [True, False]}, "moe_layers"),
        ({"hf_model_type": "mixtral"}, "attention_sinks"),
        ({"shared_expert_d_ff": 24}, "shared_expert_d_ff=24"),
    ],
)
def test_to_hf_refuses_what_gpt_oss_cannot_express(tmp_path, changes, name):
    model = pf.from_hf(save_hf(_gpt_oss(), tmp_path / "hf"))
    model = pf.Transformer(model.cfg.replace(**changes))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=name):
        pf.to_hf(model, tmp_path / "out")


def test_expert_activation_is_validated():
    with pytest.raises(ValueError, match="expert_activation"):
        pf.Config(
            vocab_size=8,
            d_model=8,
            n_layers=1,
            n_heads=2,
            n_experts=2,
            experts_per_token=1,
            expert_activation="swiglu_oai",
        )
    with pytest.raises(ValueError, match="router_softmax"):
        pf.Config(vocab_size=8, d_model=8, n_layers=1, n_heads=2, router_softmax="top_k")
