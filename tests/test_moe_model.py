"""Mixture-of-experts feed-forwards in a model: the Config fields and their errors, the load-balancing loss in the
output and in a training loss, layers with and without experts, every arch, the init schemes, the summary."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from conftest import tiny
from posformer.modules.feedforward import FeedForward
from posformer.modules.moe import MoEFeedForward
from posformer.summary import describe, matmul_params_per_token

MOE = dict(activation="swiglu", n_experts=4, experts_per_token=2, expert_d_ff=24)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"n_experts": 0, "experts_per_token": 1}, "n_experts"),
        ({"n_experts": 4}, "experts_per_token"),
        ({"n_experts": 4, "experts_per_token": 5}, "experts_per_token"),
        ({"n_experts": 4, "experts_per_token": 2, "expert_d_ff": 0}, "expert_d_ff"),
        ({"experts_per_token": 2}, "experts_per_token"),
        ({"expert_d_ff": 8}, "expert_d_ff"),
        ({"norm_topk_prob": False}, "norm_topk_prob"),
        ({"router_aux_loss_coef": 0.01}, "router_aux_loss_coef"),
        ({**MOE, "router_aux_loss_coef": -1.0}, "router_aux_loss_coef"),
        ({**MOE, "norm_topk_prob": 1}, "norm_topk_prob"),
        ({"moe_layers": [True, False]}, "moe_layers"),
        ({**MOE, "moe_layers": [True]}, "moe_layers"),
        ({**MOE, "moe_layers": [False, False]}, "moe_layers"),
        ({**MOE, "moe_layers": [1, 0]}, "moe_layers"),
        ({**MOE, "arch": "encoder_decoder", "moe_layers": [True, False]}, "moe_layers"),
    ],
)
def test_expert_fields_are_refused_by_name(changes, field):
    with pytest.raises(ValueError, match=rf"^Config\.{field}="):
        tiny(**changes)


def test_expert_fields_round_trip():
    cfg = tiny(**MOE, norm_topk_prob=False, router_aux_loss_coef=0.02, moe_layers=[False, True])
    assert pf.Config.from_dict(cfg.to_dict()) == cfg
    assert [cfg.uses_experts(i) for i in range(2)] == [False, True] and cfg.expert_ff_dim == 24
    assert tiny(n_experts=2, experts_per_token=1).expert_ff_dim == 48  # d_ff by default


def test_moe_layers_choose_experts_or_the_dense_ffn():
    model = pf.Transformer(tiny(**MOE, moe_layers=[True, False]))
    first, second = (block.ffn for block in model.decoder.layers)
    assert isinstance(first, MoEFeedForward) and first.experts.up.shape == (4, 48, 32)
    assert isinstance(second, FeedForward) and second.up.weight.shape == (96, 32)


def test_training_loss_adds_the_weighted_aux_loss_and_evaluation_does_not():
    model = pf.Transformer(tiny(**MOE, router_aux_loss_coef=0.5))
    ids = torch.randint(0, 61, (2, 9))
    model.train()
    trained = model(ids, labels=ids)
    alone = model(ids, labels=ids, return_logits=False)
    model.eval()
    evaluated = model(ids, labels=ids)
    assert abs(float(trained.aux_loss.detach()) - 2) < 0.1  # top_k when the routing is uniform, as from a fresh router
    torch.testing.assert_close(evaluated.aux_loss, trained.aux_loss)
    torch.testing.assert_close(trained.loss, evaluated.loss + 0.5 * evaluated.aux_loss)
    torch.testing.assert_close(alone.loss, trained.loss)
    assert pf.Transformer(tiny()).eval()(ids).aux_loss is None


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
@torch.no_grad()
def test_aux_loss_counts_real_tokens_only(arch):
    """The tokens at padded positions (left and right padding) change nothing in the aux loss."""
    model = pf.Transformer(tiny(arch, **MOE)).eval()
    ids = torch.randint(1, 61, (2, 8))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    mask[1, -2:] = 0
    other = torch.where(mask.bool(), ids, torch.randint(1, 61, ids.shape))
    first, second = model(ids, attention_mask=mask).aux_loss, model(other, attention_mask=mask).aux_loss
    torch.testing.assert_close(first, second)
    assert not torch.equal(first, model(other).aux_loss)


def test_encoder_decoder_with_experts_trains():
    cfg = tiny("encoder_decoder", **MOE, router_aux_loss_coef=0.1, n_decoder_layers=1)
    model = pf.Transformer(cfg)
    ids = torch.randint(1, 61, (2, 6))
    out = model(ids, labels=ids)
    out.loss.backward()
    routers = [block.ffn.router.weight.grad for stack in (model.encoder, model.decoder) for block in stack.layers]
    assert len(routers) == 3 and all(grad is not None and grad.abs().sum() > 0 for grad in routers)


@pytest.mark.parametrize("changes", [{"init": "t5", "position": "t5"}, {"norm": "deepnorm", "norm_placement": "post"}])
def test_init_schemes_draw_the_experts(changes):
    model = pf.Transformer(tiny(**MOE, **changes, n_layers=4))
    experts = model.decoder.layers[0].ffn.experts.requires_grad_(False)
    if changes.get("init") == "t5":
        assert abs(float(experts.up.std()) - 32**-0.5) < 0.02 and abs(float(experts.down.std()) - 24**-0.5) < 0.02
    else:  # deepnorm: Xavier normal of each expert's (rows, columns), gain beta < 1
        bound = (2 / (32 + 48)) ** 0.5
        assert 0.2 * bound < float(experts.up.std()) < bound
    assert model.decoder.layers[0].ffn.router.weight.std() > 0


def test_summary_counts_the_experts_a_token_goes_to():
    cfg = tiny(**MOE)
    model = pf.Transformer(cfg)
    dense = matmul_params_per_token(pf.Transformer(tiny(activation="swiglu", d_ff=24)))
    assert matmul_params_per_token(model) == dense + 2 * (4 * 32 + 32 * 48 + 32 * 24)  # router, 2nd expert
    assert "experts          4 of d_ff 24, 2 per token" in describe(cfg)


def test_memory_estimate_counts_every_expert():
    from posformer.experiments.memory_fit import weight_count

    no_biases = dict(qkv_bias=False, attn_out_bias=False, ffn_bias=False, norm="rmsnorm", position="rope")
    cfg = tiny(**{**MOE, "n_experts": 8}, **no_biases, moe_layers=[True, False], vocab_size=16)
    assert weight_count(cfg) == pytest.approx(pf.Transformer(cfg).num_parameters(), rel=0.02)
