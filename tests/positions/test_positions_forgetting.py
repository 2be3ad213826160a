"""Forgetting attention (FoX), checked by its defining properties and against x-transformers' `DataDependentAlibi`
on the same weights: gates of 1 are NoPE, a constant gate f is ALiBi with slope -log f, and the bias is the sum
of the log gates between key and query."""

from __future__ import annotations

import math

import pytest
import torch
from x_transformers.x_transformers import DataDependentAlibi

import posformer as pf
from posformer.modules.cache import LayerCache
from posformer.positions import alibi_slopes
from posformer.positions.forgetting import running_sums


def fox_config(**overrides) -> pf.Config:
    fields = dict(arch="decoder", vocab_size=53, d_model=32, n_layers=2, n_heads=4, d_ff=48, init_std=0.3)
    return pf.Config(**{**fields, **overrides, "position": overrides.get("position", "fox")})


def twin(cfg: pf.Config, position: str) -> tuple[pf.Transformer, pf.Transformer]:
    """A FoX model and one of `position` with every other weight equal."""
    torch.manual_seed(0)
    fox = pf.Transformer(cfg).eval()
    other = pf.Transformer(cfg.replace(position=position)).eval()
    missing, unexpected = other.load_state_dict(fox.state_dict(), strict=False)
    assert not missing and sorted(unexpected) == ["decoder.position.gate_bias", "decoder.position.gate_weight"]
    return fox, other


def test_gates_of_one_are_no_position_encoding() -> None:
    fox, nope = twin(fox_config(), "none")
    with torch.no_grad():
        fox.decoder.position.gate_weight.zero_()
        fox.decoder.position.gate_bias.fill_(math.inf)  # log sigmoid(inf) = 0: every gate is 1
    x = torch.randn(2, 20, 32)
    sums = running_sums(fox.decoder.position.token_terms(x, layer=0).transpose(1, 2), None)
    assert not fox.decoder.position.sums_bias(sums, sums, layer=0).any()  # the bias is exactly 0
    ids = torch.randint(1, 53, (2, 20))
    # the models agree to float32 rounding: a zero bias still sends SDPA down its masked path, not is_causal's
    torch.testing.assert_close(fox(ids).logits, nope(ids).logits)


def test_a_constant_gate_is_alibi_with_slope_minus_log_f() -> None:
    fox, alibi = twin(fox_config(), "alibi")
    slopes = alibi_slopes(4)
    gate = torch.exp(-slopes)  # f_h = exp(-m_h): log f_h = -m_h
    with torch.no_grad():
        fox.decoder.position.gate_weight.zero_()
        fox.decoder.position.gate_bias.copy_(torch.log(gate / (1 - gate)).expand(2, 4))
    ids = torch.randint(1, 53, (2, 40))
    torch.testing.assert_close(fox(ids).logits, alibi(ids).logits)


def test_the_bias_equals_x_transformers_data_dependent_alibi_on_the_same_weights() -> None:
    torch.manual_seed(1)
    position = pf.Transformer(fox_config()).decoder.position
    peer = DataDependentAlibi(32, 4, causal=True)
    with torch.no_grad():
        linear = peer.to_forget_gates[0]
        linear.weight.copy_(position.gate_weight[1])
        linear.bias.copy_(position.gate_bias[1] + torch.randn(4))
        position.gate_bias[1].copy_(linear.bias)
    x = torch.randn(3, 25, 32)
    sums = running_sums(position.token_terms(x, layer=1).transpose(1, 2), None)
    torch.testing.assert_close(position.sums_bias(sums, sums, layer=1), peer(x))


def test_the_bias_is_the_sum_of_the_log_gates_after_the_key_up_to_the_query() -> None:
    torch.manual_seed(2)
    position = pf.Transformer(fox_config()).decoder.position
    x = torch.randn(1, 9, 32)
    log_f = position.token_terms(x, layer=0)[0]  # (T, H)
    sums = running_sums(log_f.T[None], None)
    bias = position.sums_bias(sums, sums, layer=0)[0]
    for i in range(9):
        for j in range(i + 1):
            torch.testing.assert_close(bias[:, i, j], log_f[j + 1 : i + 1].sum(0), atol=1e-6, rtol=0)


def test_the_bias_decays_with_distance_and_only_forgets() -> None:
    """Gates in (0, 1): the bias is <= 0 on and below the diagonal, 0 on it, and falls as the key moves back."""
    torch.manual_seed(3)
    position = pf.Transformer(fox_config()).decoder.position
    x = torch.randn(2, 30, 32)
    sums = running_sums(position.token_terms(x, layer=0).transpose(1, 2), None)
    bias = position.sums_bias(sums, sums, layer=0)
    lower = torch.ones(30, 30).tril().bool()
    assert (bias[..., lower] <= 0).all() and bias.diagonal(dim1=-2, dim2=-1).abs().max() == 0
    closer = bias[..., :, 1:] - bias[..., :, :-1]  # key j + 1 against key j: -log f_{j+1} >= 0
    assert (closer[..., lower[:, 1:]] >= 0).all()


def test_the_cache_carries_the_running_sums_across_steps_grows_and_reorders() -> None:
    cache = LayerCache(capacity=2)
    terms = -torch.rand(2, 4, 7)
    whole = running_sums(terms, None)
    k = torch.zeros(2, 4, 7, 8)
    pos = torch.arange(7).expand(2, 7)
    for start, end in ((0, 3), (3, 4), (4, 7)):  # grows past the capacity twice
        sums = running_sums(terms[..., start:end], cache.last_sum)
        cache.append(k[:, :, start:end], k[:, :, start:end], pos[:, start:end], sums)
    torch.testing.assert_close(cache.sums, whole)
    cache.reorder(torch.tensor([1, 1]))
    torch.testing.assert_close(cache.sums, whole[[1, 1]])


def test_a_bad_gate_initialisation_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="gate_bias_init"):
        fox_config(position_params={"gate_bias_init": "high"})
    with pytest.raises(ValueError, match="fox"):
        pf.Config(arch="encoder", position="fox")
