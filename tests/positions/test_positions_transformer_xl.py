"""Transformer-XL's relative encoding: the four-term bias against its formula, position terms that depend
on the distance only, one attention layer against Hugging Face's RelPartialLearnableMultiHeadAttn, and the
clamp_len check."""

from __future__ import annotations

import math

import pytest
import torch

import posformer as pf
from posformer.ops.masks import build_mask
from tests.conftest import tiny
from tests.positions.test_positions_relative import _randomize


# --------------------------------------------------------------------------- Transformer-XL
def _xl_bias_by_hand(xl, q, k, q_pos, k_pos, layer):
    b_, h_, tq, dh = q.shape
    d = xl.d_model
    w = xl.proj[layer].weight  # (H * dh, d)
    u, v = xl.u[layer], xl.v[layer]
    k = k.repeat_interleave(h_ // k.shape[1], dim=1)
    out = torch.zeros(b_, h_, tq, k.shape[2])
    for b in range(b_):
        for i in range(tq):
            for j in range(k.shape[2]):
                dist = float(q_pos[b, i] - k_pos[b, j])
                r = torch.tensor(
                    [math.sin(dist / 10000 ** (2 * m / d)) for m in range(d // 2)]
                    + [math.cos(dist / 10000 ** (2 * m / d)) for m in range(d // 2)]
                )
                wr = (w @ r).view(h_, dh)
                for h in range(h_):
                    out[b, h, i, j] = xl.scale * (q[b, h, i] @ wr[h] + u[h] @ k[b, h, j] + v[h] @ wr[h])
    return out


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_transformer_xl_bias_is_the_four_term_formula(kv_heads: int) -> None:
    cfg = tiny("decoder", position="transformer_xl", n_kv_heads=kv_heads)
    xl = pf.positions.build(cfg, causal=True, n_layers=cfg.n_layers)
    _randomize(xl, 0.5)
    q = torch.randn(2, 4, 3, 8)
    k = torch.randn(2, kv_heads, 5, 8)
    k_pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    q_pos = k_pos[:, 2:]
    with torch.no_grad():
        got = xl.bias(q, k, q_pos, k_pos, 1)
        expected = _xl_bias_by_hand(xl, q, k, q_pos, k_pos, 1)
    attended = (k_pos[:, None, :] <= q_pos[:, :, None])[:, None].expand_as(got)  # a causal stack's only pairs
    torch.testing.assert_close(got[attended], expected[attended], atol=1e-5, rtol=1e-5)


def test_transformer_xl_position_terms_depend_only_on_distance() -> None:
    cfg = tiny("encoder", position="transformer_xl")
    xl = pf.positions.build(cfg, causal=False, n_layers=cfg.n_layers)
    _randomize(xl, 0.5)
    q = torch.randn(1, 4, 1, 8).expand(1, 4, 9, 8)  # the same query at every position
    k = torch.zeros(1, 4, 9, 8)  # no content term (c)
    pos = torch.arange(9)[None]
    with torch.no_grad():
        bias = xl.bias(q, k, pos, pos, 0)
        shifted = xl.bias(q, k, pos + 13, pos + 13, 0)
    torch.testing.assert_close(bias, shifted, atol=1e-5, rtol=1e-5)
    for i in range(9):
        for j in range(9):
            torch.testing.assert_close(bias[..., i, j], bias[..., i - min(i, j), j - min(i, j)])
    assert not torch.allclose(bias[..., 3, 1], bias[..., 3, 2])


def test_transformer_xl_attention_matches_hf_transfo_xl_layer() -> None:
    """One decoder attention layer against HF's RelPartialLearnableMultiHeadAttn (post-norm residual)."""
    from transformers.models.deprecated.transfo_xl.modeling_transfo_xl import (
        PositionalEmbedding,
        RelPartialLearnableMultiHeadAttn,
    )

    cfg = tiny("decoder", position="transformer_xl", n_layers=1, qkv_bias=False, attn_out_bias=False)
    hf = RelPartialLearnableMultiHeadAttn(cfg.n_heads, cfg.d_model, cfg.head_dim, dropout=0.0).eval()
    _randomize(hf, 0.3)
    model = pf.Transformer(cfg).eval()
    attn, xl = model.decoder.layers[0].attn, model.decoder.position
    with torch.no_grad():
        attn.qkv.weight.copy_(hf.qkv_net.weight)
        attn.out.weight.copy_(hf.o_net.weight)
        xl.proj[0].weight.copy_(hf.r_net.weight)
        xl.u[0].copy_(hf.r_w_bias)
        xl.v[0].copy_(hf.r_r_bias)
        x = torch.randn(2, 6, cfg.d_model)
        r = PositionalEmbedding(cfg.d_model)(torch.arange(5, -1, -1.0))
        causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)[:, :, None]
        expected = hf(x.transpose(0, 1), r, attn_mask=causal)[0].transpose(0, 1)
        mask = build_mask(None, True, 6, 6, x.dtype, x.device)
        out, _ = attn(x, mask, torch.arange(6).expand(2, 6))
        got = hf.layer_norm(x + out)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_transformer_xl_rejects_bad_clamp_len() -> None:
    with pytest.raises(ValueError, match="clamp_len"):
        tiny(position="transformer_xl", position_params={"clamp_len": 0})
