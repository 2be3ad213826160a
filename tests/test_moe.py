"""The mixture-of-experts feed-forward (`posformer.modules.moe`) against independent formulas: each token's output
as the sum over its top-k experts of weight * expert(x), computed token by token; the load-balancing loss
against transformers 4.57.6's `load_balancing_loss_func`; gradients to the router and the experts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssTopKRouter
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

import posformer as pf
from posformer.modules.feedforward import ACTIVATION_FNS, GATE_FNS, GATED
from posformer.modules.moe import MoEFeedForward, load_balancing_loss, route

D, E, F_DIM = 16, 5, 12


def _moe(activation: str = "swiglu", **changes) -> MoEFeedForward:
    """A 5-expert layer whose every weight and bias (zero at init) is random."""
    fields = dict(d_model=D, n_heads=2, activation=activation, n_experts=E, experts_per_token=2, expert_d_ff=F_DIM)
    moe = MoEFeedForward(pf.Config(**{**fields, "ffn_bias": False, **changes}))
    with torch.no_grad():
        for param in moe.parameters():
            param.normal_(0.0, 0.5)
    return moe


def _expert(moe: MoEFeedForward, activation: str, e: int, x: torch.Tensor) -> torch.Tensor:
    """Expert e on one token x (d_model,), from its weights, with no batching."""
    ex = moe.experts
    up = ex.up[e] @ x + (0 if ex.up_bias is None else ex.up_bias[e])
    if activation in GATED:
        gate, value = up[:F_DIM], up[F_DIM:]
        h = GATE_FNS[GATED[activation]](gate) * value
    else:
        h = ACTIVATION_FNS[activation](up)
    return ex.down[e] @ h + (0 if ex.down_bias is None else ex.down_bias[e])


def _reference(moe: MoEFeedForward, x: torch.Tensor, activation: str = "swiglu") -> torch.Tensor:
    """Token by token: the router's logits, the softmax (over all experts, or over the top k logits), the top k,
    the renormalisation, and the sum of weight * expert(x) over the token's k experts."""
    out = torch.zeros_like(x)
    flat_in, flat_out = x.reshape(-1, D), out.view(-1, D)
    for t, token in enumerate(flat_in):
        logits = moe.router.weight @ token + (0 if moe.router.bias is None else moe.router.bias)
        if moe.softmax_over == "top_k":
            top = logits.topk(moe.top_k)
            weights, experts = top.values.softmax(-1), top.indices
        else:
            top = logits.softmax(-1).topk(moe.top_k)
            weights, experts = top.values, top.indices
            if moe.renormalise:
                weights = weights / weights.sum()
        for w, e in zip(weights, experts.tolist()):
            flat_out[t] += w * _expert(moe, activation, e, token)
    return out


CASES = [
    ("swiglu", {}),
    ("swiglu", {"norm_topk_prob": False}),
    ("geglu", {"ffn_bias": True, "experts_per_token": 3}),
    ("gelu", {"ffn_bias": True}),
    ("relu", {"experts_per_token": 1}),
    ("swiglu", {"router_bias": True, "router_softmax": "top_k", "ffn_bias": True}),  # GPT-OSS's routing
]


@pytest.mark.parametrize("activation, changes", CASES, ids=lambda c: str(c))
@torch.no_grad()
def test_moe_matches_the_per_token_sum_over_its_experts(activation, changes):
    moe = _moe(activation, **changes)
    x = torch.randn(3, 7, D)
    expected = _reference(moe, x, activation)
    torch.testing.assert_close(moe(x), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(moe(x.view(-1, D)), expected.view(-1, D), rtol=1e-5, atol=1e-5)  # packed rows


@torch.no_grad()
def test_moe_takes_no_tokens_and_tokens_that_skip_experts():
    moe = _moe()
    assert moe(torch.zeros(0, D)).shape == (0, D)
    moe.router.weight[2:] = 0.0  # experts 2, 3, 4 score 0; 0 and 1 win for inputs both score positive
    x = moe.router.weight[:2].sum(0).expand(4, D) * torch.rand(4, 1) + 1e-3
    chosen = route(moe.router(x), 2)[1]
    assert set(chosen.flatten().tolist()) == {0, 1}
    torch.testing.assert_close(moe(x), _reference(moe, x), rtol=1e-5, atol=1e-5)


def test_route_as_gpt_oss_router():
    """softmax_over="top_k" with a router bias gives GPT-OSS's router scores at its chosen experts."""
    config = type("C", (), dict(num_experts_per_tok=2, num_local_experts=E, hidden_size=D))()
    router = GptOssTopKRouter(config)
    torch.nn.init.normal_(router.weight)
    torch.nn.init.normal_(router.bias)
    x = torch.randn(9, D)
    scores, indices = router(x)
    weights, experts = route(F.linear(x, router.weight, router.bias), 2, softmax_over="top_k")
    assert torch.equal(experts, indices)
    torch.testing.assert_close(weights, scores.gather(1, indices))


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_aux_loss_is_transformers_load_balancing_loss(top_k):
    """Two layers' logits of a padded batch (2 x 6, left and right padding), and without a mask."""
    logits = (torch.randn(12, E) * 2, torch.randn(12, E) * 2)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]])
    expected = load_balancing_loss_func(logits, E, top_k, mask)
    torch.testing.assert_close(load_balancing_loss(list(logits), top_k, [mask, mask]), expected)
    plain = load_balancing_loss_func(logits, E, top_k)
    torch.testing.assert_close(load_balancing_loss(list(logits), top_k, [None, None]), plain)
    assert float(load_balancing_loss([logits[0][:0]], top_k, [None])) == 0.0


def test_gradients_reach_the_router_and_every_expert_used():
    moe = _moe(norm_topk_prob=False)
    x = torch.randn(4, 9, D, requires_grad=True)
    logits: list[torch.Tensor] = []
    y = moe(x, logits)
    (y.square().sum() + load_balancing_loss(logits, 2, [None])).backward()
    used = route(logits[0], 2)[1].unique()
    assert moe.router.weight.grad.abs().sum() > 0 and x.grad.abs().sum() > 0
    for grad in (moe.experts.up.grad, moe.experts.down.grad):
        per_expert = grad.flatten(1).abs().sum(1)
        assert bool((per_expert[used] > 0).all())
        assert float(per_expert.sum()) == float(per_expert[used].sum())


def test_gradcheck_in_float64():
    """Finite differences through the router's weights, the gather and scatter of rows and the experts."""
    moe = _moe("swiglu", ffn_bias=True).double()
    names = ["router.weight", "experts.up", "experts.down", "experts.down_bias"]
    params = dict(moe.named_parameters())
    inputs = [torch.randn(2, 3, D, dtype=torch.double, requires_grad=True)]
    inputs += [params[name].detach().clone().requires_grad_() for name in names]

    def run(x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(moe, dict(zip(names, weights)), (x,))

    assert torch.autograd.gradcheck(run, inputs, fast_mode=True)
