"""Relative encodings with learned or projected vectors: BERT relative_key(_query) against Hugging Face,
Shaw against its formulas, and every such encoding (Transformer-XL and DeBERTa too) in a decoder: KV cache, left
padding, SDPA against eager. Transformer-XL: test_positions_transformer_xl.py; DeBERTa:
test_positions_deberta.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import posformer as pf
from posformer.ops.masks import AttentionMask
from tests.conftest import tiny

NEW = ["relative_key", "relative_key_query", "shaw", "transformer_xl", "deberta"]
SMALL_PARAMS = {"deberta": {"position_buckets": 4, "max_relative_positions": 8}, "shaw": {"max_distance": 3}}


def _randomize(model: nn.Module, std: float = 0.2) -> None:
    """Weights large enough that position terms visibly matter; LayerNorm weights near 1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name or name.endswith("norm.weight"):
                p.copy_(1 + std * torch.randn_like(p))
            else:
                p.copy_(std * torch.randn_like(p))


def _boost_position(model: pf.Transformer) -> None:
    for stack in (getattr(model, "encoder", None), getattr(model, "decoder", None)):
        if stack is not None:
            _randomize(stack.position, 0.5)


# ------------------------------------------------------------------ BERT relative_key(_query)
def bert_to_posformer(hf: nn.Module, ours: pf.Transformer) -> None:
    """Copy a Hugging Face `BertModel` (relative position_embedding_type, no pooler) into `ours`."""
    sd = hf.state_dict()
    new = {
        "embed_tokens.weight": sd["embeddings.word_embeddings.weight"],
        "token_types.weight": sd["embeddings.token_type_embeddings.weight"],
        "encoder.embed_norm.weight": sd["embeddings.LayerNorm.weight"],
        "encoder.embed_norm.bias": sd["embeddings.LayerNorm.bias"],
    }
    for i in range(ours.cfg.n_layers):
        h, o = f"encoder.layer.{i}.", f"encoder.layers.{i}."
        for kind in ("weight", "bias"):
            new[o + f"attn.qkv.{kind}"] = torch.cat(
                [sd[h + f"attention.self.{n}.{kind}"] for n in ("query", "key", "value")]
            )
            new[o + f"attn.out.{kind}"] = sd[h + f"attention.output.dense.{kind}"]
            new[o + f"attn_res.norm.{kind}"] = sd[h + f"attention.output.LayerNorm.{kind}"]
            new[o + f"ffn.up.{kind}"] = sd[h + f"intermediate.dense.{kind}"]
            new[o + f"ffn.down.{kind}"] = sd[h + f"output.dense.{kind}"]
            new[o + f"ffn_res.norm.{kind}"] = sd[h + f"output.LayerNorm.{kind}"]
        new[f"encoder.position.distance.{i}.weight"] = sd[h + "attention.self.distance_embedding.weight"]
    ours.load_state_dict(new, strict=True)


@pytest.mark.parametrize("kind", ["relative_key", "relative_key_query"])
def test_against_hf_bert_relative(kind: str) -> None:
    from transformers import BertConfig, BertModel

    hf_cfg = BertConfig(
        vocab_size=61,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=24,
        type_vocab_size=2,
        position_embedding_type=kind,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-12,
        attn_implementation="eager",
    )
    hf = BertModel(hf_cfg, add_pooling_layer=False).eval()
    _randomize(hf)
    cfg = pf.Config(
        arch="encoder",
        vocab_size=61,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        max_positions=24,
        position=kind,
        norm_placement="post",
        embed_norm=True,
        type_vocab_size=2,
        activation="gelu",
        norm_eps=1e-12,
        head="none",
    )
    ours = pf.Transformer(cfg).eval()
    bert_to_posformer(hf, ours)
    ids = torch.randint(1, 61, (2, 24))
    types = torch.randint(0, 2, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, -7:] = 0
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        got = ours(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    real = mask.bool()  # padded positions: HF computes a state for them, posformer skips them (zeros)
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    assert not got[~real].any()


def test_relative_key_positions_beyond_table_raise() -> None:
    model = pf.Transformer(tiny("encoder", position="relative_key", max_positions=8)).eval()
    with pytest.raises(ValueError, match="max_positions=8"):
        model(torch.randint(0, 61, (1, 9)))


# ------------------------------------------------------------------------------------ Shaw
def test_shaw_distances_beyond_k_share_one_vector() -> None:
    cfg = tiny("encoder", position="shaw", position_params={"max_distance": 3})
    shaw = pf.positions.build(cfg, causal=False, n_layers=cfg.n_layers)
    _randomize(shaw, 0.5)
    q = torch.randn(2, 4, 12, 8)
    pos = torch.arange(12).expand(2, 12)
    bias = shaw.bias(q, q, pos, pos, 1)
    for i in range(12):
        for j in range(12):
            clipped = i + max(-3, min(3, j - i))
            torch.testing.assert_close(bias[..., i, j], bias[..., i, clipped])
            expected = (q[:, :, i] @ shaw.key[1].weight[max(-3, min(3, j - i)) + 3]) * cfg.scale
            torch.testing.assert_close(bias[..., i, j], expected)
    assert not torch.allclose(bias[..., 6, 4], bias[..., 6, 5])


def test_shaw_value_term_follows_the_formula() -> None:
    k_max = 2
    cfg = tiny("encoder", position="shaw", position_params={"max_distance": k_max}, n_layers=1)
    model = pf.Transformer(cfg).eval()
    _boost_position(model)
    attn, shaw = model.encoder.layers[0].attn, model.encoder.position
    x = torch.randn(2, 7, cfg.d_model)
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [3, 4, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        out, probs = attn(x, AttentionMask(), pos, need_weights=True)
        v = attn.qkv(x)[..., -attn.kv_dim :].unflatten(-1, (cfg.n_heads, cfg.head_dim)).transpose(1, 2)
        a_v = shaw.value[0].weight
        z = torch.zeros(2, cfg.n_heads, 7, cfg.head_dim)
        for b in range(2):
            for i in range(7):
                for j in range(7):
                    rel = max(-k_max, min(k_max, int(pos[b, j] - pos[b, i]))) + k_max
                    z[b, :, i] += probs[b, :, i, j, None] * (v[b, :, j] + a_v[rel])
        expected = attn.out(z.transpose(1, 2).flatten(2))
        without = attn.out(torch.matmul(probs, v).transpose(1, 2).flatten(2))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert (out - without).abs().max() > 1e-3


def test_shaw_rejects_bad_max_distance() -> None:
    with pytest.raises(ValueError, match="max_distance"):
        tiny(position="shaw", position_params={"max_distance": 0})


# ------------------------------------------------------------- every new encoding in a decoder
@pytest.mark.parametrize("position", NEW)
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_kv_cache_decoder_equals_full_pass(position: str, kv_heads: int) -> None:
    cfg = tiny("decoder", position=position, n_kv_heads=kv_heads, position_params=SMALL_PARAMS.get(position, {}))
    model = pf.Transformer(cfg).eval()
    _boost_position(model)
    ids = torch.randint(0, cfg.vocab_size, (2, 11))
    with torch.no_grad():
        full = model(ids).logits
        cache = pf.Cache(cfg.n_layers)
        steps = [model(ids[:, :4], cache=cache).logits]
        for t in range(4, ids.shape[1]):
            steps.append(model(ids[:, t : t + 1], cache=cache).logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position", NEW)
def test_left_padding_with_position_ids_matches_unpadded(position: str) -> None:
    cfg = tiny("decoder", position=position, position_params=SMALL_PARAMS.get(position, {}))
    model = pf.Transformer(cfg).eval()
    _boost_position(model)
    short = torch.randint(1, cfg.vocab_size, (1, 5))
    long = torch.randint(1, cfg.vocab_size, (1, 8))
    batch = torch.cat((torch.cat((torch.zeros(1, 3, dtype=torch.long), short), 1), long))
    mask = torch.tensor([[0] * 3 + [1] * 5, [1] * 8])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(batch, attention_mask=mask, position_ids=pos).logits
        alone_short, alone_long = model(short).logits[0], model(long).logits[0]
    torch.testing.assert_close(logits[0, 3:], alone_short, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[1], alone_long, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("position", NEW)
def test_sdpa_equals_eager_in_an_encoder(position: str) -> None:
    cfg = tiny("encoder", position=position, position_params=SMALL_PARAMS.get(position, {}))
    sdpa = pf.Transformer(cfg).eval()
    _boost_position(sdpa)
    eager = pf.Transformer(cfg.replace(attn_impl="eager")).eval()
    eager.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, cfg.vocab_size, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    with torch.no_grad():
        a, b = sdpa(ids, attention_mask=mask).logits, eager(ids, attention_mask=mask).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
