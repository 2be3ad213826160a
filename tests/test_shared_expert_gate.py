"""The gate on a mixture of experts' shared expert (`Config.shared_expert_gate`, Qwen3-Next's `shared_expert_gate`):
token by token, the output is the routed experts' plus sigmoid(w . x) times the shared expert's; gradients reach w;
settings without a shared expert, and families that have no such gate, are refused by name. (The whole layer
against transformers' Qwen3NextSparseMoeBlock: tests/hf/test_hf_qwen3_next.py.)"""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.modules.moe import MoEFeedForward

D = 16
FIELDS = dict(d_model=D, n_heads=2, activation="swiglu", ffn_bias=False, n_experts=5, experts_per_token=2)


def _gated_and_plain() -> tuple[MoEFeedForward, MoEFeedForward]:
    """Two layers with the same random router, experts and shared expert; the first also has the gate."""
    torch.manual_seed(0)
    gated = MoEFeedForward(pf.Config(**FIELDS, expert_d_ff=12, shared_expert_d_ff=20, shared_expert_gate=True))
    with torch.no_grad():
        for param in gated.parameters():
            param.normal_(0.0, 0.5)
    plain = MoEFeedForward(pf.Config(**FIELDS, expert_d_ff=12, shared_expert_d_ff=20))
    state = {key: value for key, value in gated.state_dict().items() if not key.startswith("shared_expert_gate")}
    plain.load_state_dict(state)
    return gated, plain


@torch.no_grad()
def test_the_shared_expert_is_scaled_by_the_sigmoid_of_its_gate_token_by_token():
    gated, plain = _gated_and_plain()
    x = torch.randn(2, 7, D)
    expected = torch.stack(
        [
            plain(token)
            - plain.shared_expert(token)
            + torch.sigmoid(gated.shared_expert_gate.weight[0] @ token) * plain.shared_expert(token)
            for token in x.reshape(-1, D)
        ]
    ).view_as(x)
    torch.testing.assert_close(gated(x), expected, atol=1e-5, rtol=1e-5)
    assert (gated(x) - plain(x)).abs().max() > 1e-2  # the gate changes the output


def test_gradients_reach_the_gate():
    gated, _ = _gated_and_plain()
    gated(torch.randn(3, D)).pow(2).sum().backward()
    assert gated.shared_expert_gate.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"expert_d_ff": 12}, "Config.shared_expert_gate=True is invalid: expected False without shared_expert_d_ff"),
        ({"n_experts": None, "experts_per_token": None}, r"Config.shared_expert_gate=True is invalid.*n_experts"),
        ({"expert_d_ff": 12, "shared_expert_d_ff": 20, "shared_expert_gate": 1}, "Config.shared_expert_gate=1"),
    ],
)
def test_a_gate_without_a_shared_expert_is_refused_by_name(changes, name):
    with pytest.raises(ValueError, match=name):
        pf.Config(**{**FIELDS, "shared_expert_gate": True, **changes})


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "glm4_moe", "llama4_text"])
def test_families_without_the_gate_refuse_it_by_name(tmp_path, family):
    cfg = pf.Config(
        **FIELDS, expert_d_ff=12, shared_expert_d_ff=20, shared_expert_gate=True, position="rope", norm="rmsnorm"
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="Config.shared_expert_gate=True"):
        pf.to_hf(pf.Transformer(cfg.replace(hf_model_type=family)), tmp_path)
