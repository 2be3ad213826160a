"""GLM-4.5 (glm4_moe) against transformers 4.57.6 and 5: a dense first layer then expert layers routed as DeepSeek-V3
(sigmoid scores, a correction bias for the choice only, the top-k within the best of several groups, a scale) with
shared experts; partial RoPE (half of each head, "half" layout); QK-norm and q/k/v biases; logits on a padded
batch, a round trip, greedy generation equal to HF's; the router alone against HF's; transformers 5's fused experts;
multi-token prediction layers left out as transformers leaves them; refusals by name."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import Glm4MoeConfig, Glm4MoeForCausalLM, Glm4MoeModel
from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeTopkRouter

import posformer as pf
from hf_oracle import (
    TRANSFORMERS_5,
    assert_generates_hf_tokens,
    assert_same_outputs,
    assert_to_hf_refuses,
    check_family,
    padded_batch,
    save_fused_experts,
    save_hf,
)
from posformer.modules.sigmoid_router import sigmoid_route

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    moe_intermediate_size=16,
    num_hidden_layers=3,
    first_k_dense_replace=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    n_routed_experts=8,
    num_experts_per_tok=3,
    n_group=4,
    topk_group=2,
    n_shared_experts=2,
    routed_scaling_factor=2.5,
    max_position_embeddings=32,
    initializer_range=0.2,
    rope_theta=100.0,
)


@torch.no_grad()
def _glm(model_class=Glm4MoeForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(Glm4MoeConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts norm weights at one and biases at zero; make them show
        if "norm" in name or name.endswith("bias"):
            param.normal_(1.0 if "norm" in name else 0.0, 0.5)
    for name, buffer in hf.named_buffers():  # the correction biases start at zero: give them a say in the choice
        if name.endswith("e_score_correction_bias"):
            buffer.uniform_(0.0, 0.5)
    return hf


@pytest.mark.parametrize(
    "changes, length",
    [
        ({}, 11),
        ({"use_qk_norm": True, "attention_bias": True}, 11),
        ({"n_group": 1, "topk_group": 1, "norm_topk_prob": False, "tie_word_embeddings": True}, 11),
        ({"n_shared_experts": 0, "first_k_dense_replace": 0, "partial_rotary_factor": 1.0}, 11),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16}}, 40),
    ],
    ids=["default", "qk-norm-biases", "no-groups-unnormalised-tied", "no-shared-no-dense-full-rope", "yarn-long"],
)
def test_against_hf_glm4_moe(tmp_path, changes, length):
    model = check_family(_glm(**changes), Glm4MoeForCausalLM, tmp_path, padded_batch(97, length=length))
    cfg, hf = model.cfg, {**SIZES, **changes}
    dense = hf["first_k_dense_replace"]
    assert [block.has_experts for block in model.decoder.layers] == [i >= dense for i in range(3)]
    assert cfg.sigmoid_router == {"groups": hf["n_group"], "top_groups": hf["topk_group"], "scale": 2.5}
    assert cfg.shared_expert_d_ff == (16 * hf["n_shared_experts"] or None) and cfg.qk_norm == bool(
        hf.get("use_qk_norm")
    )
    assert cfg.position_params.get("rotary_fraction", 1.0) == hf.get("partial_rotary_factor", 0.5)
    assert (cfg.qkv_bias, cfg.attn_out_bias) == (bool(hf.get("attention_bias")), False)


def test_against_hf_glm4_moe_base_model(tmp_path):
    model = check_family(_glm(Glm4MoeModel), Glm4MoeModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


def test_glm4_moe_generates_hf_tokens(tmp_path):
    """From a full and a left-padded prompt, with the KV cache, shorter and longer than max_position_embeddings."""
    hf = _glm(use_qk_norm=True, attention_bias=True)
    assert_generates_hf_tokens(pf.from_hf(save_hf(hf, tmp_path)), hf, 97, lengths=(6, 40))


def _hf_route(router: Glm4MoeTopkRouter, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, experts) of HF's router, each token's experts in increasing order (4.57.6 returns (experts,
    weights), 5.x (logits, weights, experts))."""
    out = router(x)
    experts, weights = out if len(out) == 2 else (out[2], out[1])
    order = experts.argsort(dim=-1)
    return weights.gather(1, order), experts.gather(1, order)


@pytest.mark.parametrize("normalise", [True, False])
@pytest.mark.parametrize("bias_low", [0.0, -1.0], ids=["positive-bias", "negative-bias"])
@torch.no_grad()
def test_sigmoid_route_is_hf_router(normalise, bias_low):
    """16 experts in 4 groups, the best 2 groups, top 4, on 256 random tokens; the group limit and the bias each
    change some token's experts (so the test sees them). With biases below zero, kept experts may score below zero:
    transformers 5 (and posformer) keep the groups left out away by -inf, 4.57.6 by 0, and its choice differs."""
    hf = Glm4MoeConfig(**{**SIZES, "n_routed_experts": 16, "num_experts_per_tok": 4, "norm_topk_prob": normalise})
    router = Glm4MoeTopkRouter(hf)
    torch.manual_seed(1)
    router.weight.normal_(0.0, 0.3)
    router.e_score_correction_bias.uniform_(bias_low, bias_low + 0.5)
    x = torch.randn(256, 32)
    logits, bias = F.linear(x, router.weight), router.e_score_correction_bias
    ours = sigmoid_route(logits, bias, 4, groups=4, top_groups=2, renormalise=normalise, scale=2.5)
    order = ours[1].argsort(dim=-1)
    weights, experts = ours[0].gather(1, order), ours[1].gather(1, order)
    theirs = _hf_route(router, x)
    if bias_low < 0 and not TRANSFORMERS_5:
        assert not torch.equal(experts, theirs[1])
        return
    assert torch.equal(experts, theirs[1]) and torch.allclose(weights, theirs[0], atol=1e-6, rtol=0)
    ungrouped = sigmoid_route(logits, bias, 4, renormalise=normalise, scale=2.5)[1].sort(dim=-1).values
    unbiased = sigmoid_route(logits, torch.zeros(16), 4, 4, 2, normalise, 2.5)[1].sort(dim=-1).values
    assert not torch.equal(ungrouped, experts) and not torch.equal(unbiased, experts)


def test_glm4_moe_reads_fused_experts(tmp_path):
    """transformers 5's layout (one gate_up_proj and one down_proj per expert layer), beside the router's weight
    and correction bias and the shared experts, checked to be 5's own state dict under 5."""
    hf = _glm()
    assert_same_outputs(pf.from_hf(save_fused_experts(hf, tmp_path)), hf, padded_batch(97))


def test_glm4_moe_leaves_out_mtp_layers_as_hf_does(tmp_path):
    """A checkpoint with one multi-token prediction layer (model.layers.3, GLM-4.5's eh_proj / enorm / hnorm beside
    a decoder layer's tensors): transformers loads it without that layer, posformer too; without
    `num_nextn_predict_layers` declaring it, posformer refuses its tensors by name."""
    hf = _glm()
    save_hf(hf, tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    mtp = {key.replace("layers.2.", "layers.3."): v.clone() for key, v in state.items() if ".layers.2." in key}
    mtp.update({f"model.layers.3.{n}.weight": torch.randn(32) for n in ("enorm", "hnorm", "shared_head.norm")})
    mtp["model.layers.3.eh_proj.weight"] = torch.randn(32, 64)
    save_file({**state, **mtp}, tmp_path / "model.safetensors")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    reloaded = Glm4MoeForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert_same_outputs(pf.from_hf(tmp_path), reloaded, padded_batch(97))
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 0}))
    with pytest.raises(pf.hf.WeightMapError, match=r"model\.layers\.3\.eh_proj"):
        pf.from_hf(tmp_path)


def test_glm4_moe_rotates_half_of_each_head_by_default(tmp_path):
    """A config.json without partial_rotary_factor: transformers' default 0.5 (4.57.6's top-level key, 5.x's inside
    rope_parameters, both removed)."""
    hf = _glm()
    save_hf(hf, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("partial_rotary_factor", None)
    config.get("rope_parameters", {}).pop("partial_rotary_factor", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    reloaded = Glm4MoeForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    model = pf.from_hf(tmp_path)
    assert model.cfg.position_params["rotary_fraction"] == 0.5
    assert_same_outputs(model, reloaded, padded_batch(97))


def test_glm4_moe_writes_its_own_fields_back(tmp_path):
    pf.to_hf(pf.from_hf(save_hf(_glm(use_qk_norm=True, attention_bias=True), tmp_path / "hf")), tmp_path / "out")
    out = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (out["first_k_dense_replace"], out["n_routed_experts"], out["n_shared_experts"]) == (1, 8, 2)
    assert (out["n_group"], out["topk_group"], out["routed_scaling_factor"], out["norm_topk_prob"]) == (4, 2, 2.5, True)
    assert (out["use_qk_norm"], out["attention_bias"], out["partial_rotary_factor"]) == (True, True, 0.5)
    assert (out["num_nextn_predict_layers"], out["moe_intermediate_size"], out["intermediate_size"]) == (0, 16, 48)


@pytest.mark.parametrize(
    "feature, error, name",
    [
        ({"hidden_act": "gelu_new"}, pf.hf.UnsupportedCheckpoint, "hidden_act"),
        ({"first_k_dense_replace": 3}, pf.hf.UnsupportedCheckpoint, "no layer with experts"),
        ({"n_group": 3}, ValueError, r"sigmoid_router\['groups'\]"),
        ({"topk_group": 1}, ValueError, "experts_per_token"),
    ],
    ids=lambda f: str(f),
)
def test_unsupported_glm4_moe_features_are_refused_by_name(tmp_path, feature, error, name):
    """Each a model transformers builds; n_group=3 (8 experts) and 1 group of 2 experts for top 3 fail only in its
    forward."""
    _glm(**feature).save_pretrained(tmp_path)
    with pytest.raises(error, match=name):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"attn_out_bias": True}, "attn_out_bias"),
        ({"sigmoid_router": None}, "sigmoid_router"),
        ({"moe_layers": [True, False, True]}, "moe_layers"),
        ({"shared_expert_d_ff": 24}, "shared_expert_d_ff"),
        ({"router_aux_loss_coef": 0.1}, "router_aux_loss_coef"),
        ({"position_params": {"theta": 100.0, "layout": "interleaved", "rotary_fraction": 0.5}}, "interleaved"),
    ],
)
def test_to_hf_refuses_what_glm4_moe_cannot_express(tmp_path, changes, name):
    assert_to_hf_refuses(pf.from_hf(save_hf(_glm(), tmp_path / "hf")).cfg, changes, name, tmp_path / "out")


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "gpt_oss"])
def test_softmax_families_refuse_the_sigmoid_router(tmp_path, family):
    """Named as the model's own family (`Config.hf_model_type`), before the family's own checks."""
    cfg = pf.from_hf(save_hf(_glm(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, {"hf_model_type": family}, "sigmoid_router", tmp_path / "out")


@pytest.mark.parametrize("key, value", [("n_group", "4"), ("routed_scaling_factor", "2.5"), ("use_qk_norm", 1)])
def test_glm4_moe_config_values_of_the_wrong_kind_are_named(tmp_path, key, value):
    save_hf(_glm(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(ValueError, match=rf"config\.json: {key}="):
        pf.from_hf(tmp_path)
