"""Forgetting attention (FoX) and its per-row form, checked by their defining properties and against x-transformers'
`DataDependentAlibi` and `PerRowDataDependentAlibi` on the same weights: gates of 1 are NoPE, a constant gate f is
ALiBi with slope -log f, and the bias is the sum of the log gates between key and query."""

from __future__ import annotations

import math

import pytest
import torch
from x_transformers.x_transformers import DataDependentAlibi, PerRowDataDependentAlibi

import posformer as pf
from posformer.modules.cache import LayerCache
from posformer.positions import alibi_slopes


def fox_config(**overrides) -> pf.Config:
    fields = dict(arch="decoder", vocab_size=53, d_model=32, n_layers=2, n_heads=4, d_ff=48, init_std=0.3)
    return pf.Config(**{**fields, **overrides, "position": overrides.get("position", "fox")})


def fox_bias(position, x: torch.Tensor, layer: int) -> torch.Tensor:
    """The bias (B, H, T, T) of an encoding that reads the hidden states x (B, T, d_model), every query over every
    key."""
    q_terms, k_terms = position.token_terms(x, layer)
    q = torch.zeros(*k_terms.shape[:3], position.head_dim)  # FoX reads no query or key
    return position.terms_bias(q_terms, k_terms, torch.arange(x.shape[1]), layer, q, q)


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
    assert not fox_bias(fox.decoder.position, torch.randn(2, 20, 32), layer=0).any()  # the bias is exactly 0
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
    torch.testing.assert_close(fox_bias(position, x, layer=1), peer(x))


def test_the_per_row_bias_equals_x_transformers_per_row_data_dependent_alibi_on_the_same_weights() -> None:
    torch.manual_seed(4)
    position = pf.Transformer(fox_config(position="fox_per_row")).decoder.position
    peer = PerRowDataDependentAlibi(32, 4, causal=True, dim_head=8)
    with torch.no_grad():
        peer.to_forget_gates[0].weight.copy_(position.gate_weight[0])
    x = torch.randn(2, 21, 32)
    ours = fox_bias(position, x, layer=0)
    lower = torch.ones(21, 21).tril().bool()  # x-transformers leaves the future pairs unmasked; the mask hides them
    torch.testing.assert_close(ours[..., lower], peer(x)[..., lower])
    assert not ours[..., ~lower].any()


def test_the_bias_is_the_sum_of_the_log_gates_after_the_key_up_to_the_query() -> None:
    torch.manual_seed(2)
    position = pf.Transformer(fox_config()).decoder.position
    x = torch.randn(1, 9, 32)
    log_f = position.log_gates(x, layer=0)[0]  # (T, H)
    bias = fox_bias(position, x, layer=0)[0]
    for i in range(9):
        for j in range(i + 1):
            torch.testing.assert_close(bias[:, i, j], log_f[j + 1 : i + 1].sum(0), atol=1e-6, rtol=0)


def test_the_bias_decays_with_distance_and_only_forgets() -> None:
    """Gates in (0, 1): the bias is <= 0 on and below the diagonal, 0 on it, and falls as the key moves back."""
    torch.manual_seed(3)
    position = pf.Transformer(fox_config()).decoder.position
    bias = fox_bias(position, torch.randn(2, 30, 32), layer=0)
    lower = torch.ones(30, 30).tril().bool()
    assert (bias[..., lower] <= 0).all() and bias.diagonal(dim1=-2, dim2=-1).abs().max() == 0
    closer = bias[..., :, 1:] - bias[..., :, :-1]  # key j + 1 against key j: -log f_{j+1} >= 0
    assert (closer[..., lower[:, 1:]] >= 0).all()


def test_the_cache_keeps_the_key_terms_across_steps_growth_and_reordering() -> None:
    cache = LayerCache(capacity=2)
    terms = torch.randn(2, 4, 7, 3)
    k = torch.zeros(2, 4, 7, 8)
    pos = torch.arange(7).expand(2, 7)
    for start, end in ((0, 3), (3, 4), (4, 7)):  # grows past the capacity twice
        cache.append(k[:, :, start:end], k[:, :, start:end], pos[:, start:end], terms[:, :, start:end])
    assert torch.equal(cache.terms, terms)
    cache.reorder(torch.tensor([1, 1]))
    assert torch.equal(cache.terms, terms[[1, 1]])
    cache.keep_slots(torch.tensor([0, 5, 6]))
    assert torch.equal(cache.terms, terms[[1, 1]][:, :, [0, 5, 6]])


def test_a_bad_gate_initialisation_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="gate_bias_init"):
        fox_config(position_params={"gate_bias_init": "high"})
    with pytest.raises(ValueError, match="fox"):
        pf.Config(arch="encoder", position="fox")
    with pytest.raises(ValueError, match="gate_dim"):
        fox_config(position="fox_per_row", position_params={"gate_dim": 0})
    with pytest.raises(ValueError, match="fox_per_row"):
        fox_config(position="fox_per_row", attn_impl="flex")
