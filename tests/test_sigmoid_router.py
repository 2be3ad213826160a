"""DeepSeek-V3's router (`Config.sigmoid_router`, `posformer.modules.sigmoid_router`): its Config fields and their
errors; a mixture-of-experts layer routed by it against the routing written out token by token from the
DeepSeek-V3 report's description (sigmoid scores, the bias for the choice only, groups scored by their two best,
the weights normalised and scaled); the bias kept in the state dict and out of the gradient. Parity with
transformers' router: tests/hf/test_hf_glm4_moe.py."""

from __future__ import annotations

import itertools

import pytest
import torch

import posformer as pf
from conftest import tiny
from posformer.modules.moe import MoEFeedForward

MOE = dict(activation="swiglu", n_experts=8, experts_per_token=3, expert_d_ff=12, ffn_bias=False)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"sigmoid_router": {"groups": 2}}, "sigmoid_router"),  # without n_experts
        ({**MOE, "sigmoid_router": {"group": 2}}, "sigmoid_router"),
        ({**MOE, "sigmoid_router": [2, 1, 1.0]}, "sigmoid_router"),
        ({**MOE, "sigmoid_router": {"groups": 3}}, r"sigmoid_router\['groups'\]"),
        ({**MOE, "sigmoid_router": {"groups": 8, "top_groups": 8}}, r"sigmoid_router\['groups'\]"),  # 1 per group
        ({**MOE, "sigmoid_router": {"groups": 4, "top_groups": 5}}, r"sigmoid_router\['top_groups'\]"),
        ({**MOE, "sigmoid_router": {"groups": 4, "top_groups": 1}}, "experts_per_token"),  # 2 experts < 3
        ({**MOE, "sigmoid_router": {"scale": 0.0}}, r"sigmoid_router\['scale'\]"),
        ({**MOE, "sigmoid_router": {}, "router_softmax": "top_k"}, "router_softmax"),
    ],
)
def test_sigmoid_router_fields_are_refused_by_name(changes, field):
    with pytest.raises(ValueError, match=rf"^Config\.{field}="):
        tiny(**changes)


def test_sigmoid_router_is_resolved_and_round_trips():
    cfg = tiny(**MOE, sigmoid_router={"groups": 2, "scale": 2})
    assert cfg.sigmoid_router == {"groups": 2, "top_groups": 1, "scale": 2.0}
    assert pf.Config.from_dict(cfg.to_dict()) == cfg


def _reference(moe: MoEFeedForward, x: torch.Tensor, groups: int, top_groups: int, scale: float) -> torch.Tensor:
    """Token by token: s = sigmoid(router logits), the choice among the experts of the `top_groups` groups with the
    highest sum of their two best s + b (every set of groups tried), its top k of s + b; weights s over their sum,
    times `scale`; the sum of weight * expert(x) with each expert run as its own SwiGLU."""
    ex, size, k = moe.experts, MOE["n_experts"] // groups, MOE["experts_per_token"]
    out = torch.zeros_like(x)
    for t, token in enumerate(x):
        s = torch.sigmoid(moe.router.weight @ token)
        choice = (s + moe.sigmoid_router.score_bias).tolist()
        group_score = [sum(sorted(choice[g * size : (g + 1) * size])[-2:]) for g in range(groups)]
        best = max(itertools.combinations(range(groups), top_groups), key=lambda gs: sum(group_score[g] for g in gs))
        allowed = [e for g in best for e in range(g * size, (g + 1) * size)]
        experts = sorted(allowed, key=lambda e: choice[e])[-k:]
        weights = s[experts] / s[experts].sum() * scale
        for w, e in zip(weights, experts):
            gate, value = (ex.up[e] @ token).split(MOE["expert_d_ff"])
            out[t] += w * (ex.down[e] @ (torch.nn.functional.silu(gate) * value))
    return out


@pytest.mark.parametrize("groups, top_groups", [(1, 1), (4, 2), (2, 1)])
@torch.no_grad()
def test_moe_with_the_sigmoid_router_matches_the_routing_token_by_token(groups, top_groups):
    cfg = tiny(**MOE, sigmoid_router={"groups": groups, "top_groups": top_groups, "scale": 2.5})
    moe = MoEFeedForward(cfg)
    torch.manual_seed(0)
    for tensor in (*moe.parameters(), moe.sigmoid_router.score_bias):
        tensor.normal_(0.0, 0.5)
    x = torch.randn(40, 32)
    torch.testing.assert_close(moe(x), _reference(moe, x, groups, top_groups, 2.5), rtol=1e-5, atol=1e-5)


def test_the_bias_is_state_not_a_parameter(tmp_path):
    """It is saved and loaded with the model, and the gradient reaches the router's weights but not it."""
    model = pf.Transformer(tiny(**MOE, sigmoid_router={"groups": 4, "top_groups": 2}, moe_layers=[False, True]))
    ffn = model.decoder.layers[1].ffn
    with torch.no_grad():
        ffn.sigmoid_router.score_bias.uniform_(0.0, 1.0)
    assert "decoder.layers.1.ffn.sigmoid_router.score_bias" in model.state_dict()
    assert all("score_bias" not in name for name, _ in model.named_parameters())
    model.save_pretrained(tmp_path)
    loaded = pf.Transformer.from_pretrained(tmp_path)
    assert torch.equal(loaded.decoder.layers[1].ffn.sigmoid_router.score_bias, ffn.sigmoid_router.score_bias)
    model(torch.randint(0, 61, (2, 7))).logits.square().sum().backward()
    assert ffn.router.weight.grad.abs().sum() > 0 and ffn.sigmoid_router.score_bias.grad is None
