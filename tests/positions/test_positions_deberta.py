"""DeBERTa's relative encoding: whole encoders against Hugging Face's DebertaV2Model, the log buckets, the
default attention scale and the pos_att_type check."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import posformer as pf
from tests.conftest import tiny
from tests.positions.test_positions_relative import _randomize


# ---------------------------------------------------------------------------------- DeBERTa
def deberta_to_posformer(hf: nn.Module, ours: pf.Transformer) -> None:
    """Copy a Hugging Face `DebertaV2Model` (share_att_key=False, no absolute positions) into `ours`."""
    sd = hf.state_dict()
    new = {
        "embed_tokens.weight": sd["embeddings.word_embeddings.weight"],
        "encoder.embed_norm.weight": sd["embeddings.LayerNorm.weight"],
        "encoder.embed_norm.bias": sd["embeddings.LayerNorm.bias"],
        "encoder.position.rel_embeddings.weight": sd["encoder.rel_embeddings.weight"],
    }
    if "encoder.LayerNorm.weight" in sd:
        new["encoder.position.norm.weight"] = sd["encoder.LayerNorm.weight"]
        new["encoder.position.norm.bias"] = sd["encoder.LayerNorm.bias"]
    for i in range(ours.cfg.n_layers):
        h, o = f"encoder.layer.{i}.", f"encoder.layers.{i}."
        for kind in ("weight", "bias"):
            new[o + f"attn.qkv.{kind}"] = torch.cat(
                [sd[h + f"attention.self.{n}_proj.{kind}"] for n in ("query", "key", "value")]
            )
            new[o + f"attn.out.{kind}"] = sd[h + f"attention.output.dense.{kind}"]
            new[o + f"attn_res.norm.{kind}"] = sd[h + f"attention.output.LayerNorm.{kind}"]
            new[o + f"ffn.up.{kind}"] = sd[h + f"intermediate.dense.{kind}"]
            new[o + f"ffn.down.{kind}"] = sd[h + f"output.dense.{kind}"]
            new[o + f"ffn_res.norm.{kind}"] = sd[h + f"output.LayerNorm.{kind}"]
            for proj in ("pos_key_proj", "pos_query_proj"):
                if h + f"attention.self.{proj}.{kind}" in sd:
                    new[f"encoder.position.{proj}.{i}.{kind}"] = sd[h + f"attention.self.{proj}.{kind}"]
    ours.load_state_dict(new, strict=True)


@pytest.mark.parametrize(
    "buckets, max_rel, norm_rel_ebd, types",
    [(8, 16, "layer_norm", ["p2c", "c2p"]), (-1, 6, "none", ["p2c", "c2p"]), (8, 12, "none", ["c2p"])],
)
def test_against_hf_deberta_v2(buckets: int, max_rel: int, norm_rel_ebd: str, types: list[str]) -> None:
    from transformers import DebertaV2Config, DebertaV2Model

    hf_cfg = DebertaV2Config(
        vocab_size=61,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=64,
        type_vocab_size=0,
        relative_attention=True,
        pos_att_type=types,
        position_buckets=buckets,
        max_relative_positions=max_rel,
        share_att_key=False,
        norm_rel_ebd=norm_rel_ebd,
        position_biased_input=False,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-7,
    )
    hf = DebertaV2Model(hf_cfg).eval()
    _randomize(hf)
    cfg = pf.Config(
        arch="encoder",
        vocab_size=61,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        max_positions=64,
        position="deberta",
        norm_placement="post",
        embed_norm=True,
        activation="gelu",
        norm_eps=1e-7,
        head="none",
        attn_scale=1 / math.sqrt(8 * (1 + len(types))),
        position_params={
            "position_buckets": buckets,
            "max_relative_positions": max_rel,
            "norm_rel_ebd": norm_rel_ebd,
            "pos_att_type": types,
        },
    )
    ours = pf.Transformer(cfg).eval()
    deberta_to_posformer(hf, ours)
    ids = torch.randint(1, 61, (2, 21))
    mask = torch.ones_like(ids)
    mask[1, -6:] = 0
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, attention_mask=mask).last_hidden_state
    # HF zeroes the embeddings of padded tokens, which changes only the padded rows' own outputs.
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-5)


def test_deberta_log_buckets_match_hf() -> None:
    from transformers.models.deberta_v2.modeling_deberta_v2 import (
        make_log_bucket_position,
    )

    rel = torch.arange(-600, 601)
    for buckets, max_pos in ((256, 512), (8, 16), (32, 100)):
        expected = make_log_bucket_position(rel, buckets, max_pos).long()
        assert torch.equal(pf.positions.log_bucket_position(rel, buckets, max_pos), expected)


def test_deberta_rejects_bad_pos_att_type() -> None:
    with pytest.raises(ValueError, match="pos_att_type"):
        tiny(position="deberta", position_params={"pos_att_type": ["c2c"]})


@pytest.mark.parametrize("types", [["c2p", "p2c"], ["c2p"]])
def test_deberta_default_scale_is_hugging_faces(types: list[str]) -> None:
    """HF DeBERTa-v2 divides every term by sqrt(head_dim * (1 + number of position terms))."""
    cfg = pf.Config(
        arch="encoder",
        vocab_size=20,
        d_model=32,
        n_layers=1,
        n_heads=4,
        position="deberta",
        position_params={"pos_att_type": types},
    )
    assert cfg.scale == pytest.approx(1 / math.sqrt(8 * (1 + len(types))))
    assert cfg.replace(attn_scale=0.5).scale == 0.5
