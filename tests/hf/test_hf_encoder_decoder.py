"""EncoderDecoderModel with a BERT encoder and a BERT decoder (BERT2BERT) against transformers 4.57.6.

Logits with padded sources and padded decoder inputs, the loss from labels, `to_hf` round trips,
and the refusals. Greedy and beam-search generation against HF `generate`: tests/test_generation_hf.py
(family "bert2bert").
"""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel, RobertaConfig

import posformer as pf
from hf_noise import perturb_constants
from hf_oracle import (
    assert_same_outputs,
    assert_to_hf_refuses,
    check_family,
    padded_batch,
    removed_in_transformers_5,
    round_trip,
    save_hf,
)

RELATIVE_KEY = removed_in_transformers_5("BERT's relative_key and relative_key_query position embeddings")

VOCAB = 97
SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_attention_heads=4,
    intermediate_size=40,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    initializer_range=0.2,
)
IDS = dict(decoder_start_token_id=2, pad_token_id=0, eos_token_id=3)


def _config(encoder: dict | None = None, decoder: dict | None = None, **top) -> EncoderDecoderConfig:
    """(`from_encoder_decoder_configs` would switch the decoder's is_decoder / add_cross_attention on.)"""
    enc = BertConfig(**{**SIZES, "num_hidden_layers": 2, **(encoder or {})})
    dec = BertConfig(
        **{**SIZES, "num_hidden_layers": 3, "is_decoder": True, "add_cross_attention": True, **(decoder or {})}
    )
    return EncoderDecoderConfig(encoder=enc.to_dict(), decoder=dec.to_dict(), **{**IDS, **top})


def _bert2bert(encoder: dict | None = None, decoder: dict | None = None) -> EncoderDecoderModel:
    """A random BERT2BERT whose LayerNorms and biases (HF: 1 and 0) are random too, so mapping mistakes show."""
    config = _config(encoder, decoder)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return perturb_constants(EncoderDecoderModel(config)).eval()


def _decoder_inputs() -> dict[str, torch.Tensor]:
    """Decoder ids (3, 7) with a full, a right-padded and a left-padded row."""
    batch = padded_batch(VOCAB, length=7, seed=1)
    return {"decoder_input_ids": batch["input_ids"], "decoder_attention_mask": batch["attention_mask"]}


def test_against_hf_bert2bert(tmp_path):
    model = check_family(_bert2bert(), EncoderDecoderModel, tmp_path, padded_batch(VOCAB), **_decoder_inputs())
    cfg = model.cfg
    assert cfg.arch == "encoder_decoder" and cfg.separate_decoder_embeddings and cfg.head_transform
    assert (cfg.n_layers, cfg.decoder_layers, cfg.position, cfg.norm_placement) == (2, 3, "learned", "post")
    assert model.head.proj.weight is model.decoder_embed_tokens.weight
    assert model.decoder_embed_tokens.weight is not model.embed_tokens.weight
    assert (cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id) == (2, 0, 3)


@pytest.mark.parametrize(
    "changes",
    [
        {"tie_word_embeddings": False},
        pytest.param({"position_embedding_type": "relative_key"}, marks=RELATIVE_KEY),
        pytest.param({"position_embedding_type": "relative_key_query", "hidden_act": "gelu_new"}, marks=RELATIVE_KEY),
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_against_hf_bert2bert_variants(tmp_path, changes):
    """Finding: with relative positions, transformers 4.57's BERT decoder gives every query of a
    several-token pass the distances of the last query when it holds a cache (use_cache=True, its
    default); posformer gives each query its own, as HF does with use_cache=False and step by step
    (as in generation, where each step is one token)."""
    shared = {k: v for k, v in changes.items() if k != "tie_word_embeddings"}
    hf = _bert2bert(shared, changes)
    model = check_family(hf, EncoderDecoderModel, tmp_path, padded_batch(VOCAB), use_cache=False, **_decoder_inputs())
    tied = changes.get("tie_word_embeddings", True)
    assert model.cfg.tie_embeddings == tied
    assert (model.head.proj.weight is model.decoder_embed_tokens.weight) == tied


@torch.no_grad()
def test_loss_from_labels_equals_hf(tmp_path):
    """Labels (-100 ignored): both shift them right behind decoder_start_token_id and give the same loss and
    the same logits where a label is set (HF also masks the pads it writes into the decoder inputs)."""
    hf = _bert2bert()
    hf.save_pretrained(tmp_path)
    model = pf.from_hf(tmp_path).eval()
    batch = padded_batch(VOCAB)
    labels = torch.randint(4, VOCAB, (3, 6), generator=torch.Generator().manual_seed(2))
    labels[1, 4:] = -100
    ours, theirs = model(**batch, labels=labels), hf(**batch, labels=labels)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=0, atol=1e-5)
    labelled = labels != -100
    torch.testing.assert_close(ours.logits[labelled], theirs.logits[labelled], rtol=0, atol=1e-4)


def test_posformer_bert2bert_layout_exports_to_transformers(tmp_path):
    cfg = pf.Config.preset(
        "bert",
        vocab_size=VOCAB,
        d_model=32,
        n_layers=1,
        n_heads=4,
        d_ff=40,
        max_positions=64,
        init_std=0.2,
        arch="encoder_decoder",
        n_decoder_layers=2,
        head="seq2seq_lm",
        separate_decoder_embeddings=True,
        head_transform=True,
        head_bias=True,
        decoder_start_token_id=2,
        eos_token_id=3,
        hf_model_type="encoder-decoder",
    )
    torch.manual_seed(0)
    model = pf.Transformer(cfg).eval()
    hf = round_trip(model, EncoderDecoderModel, tmp_path)
    assert hf.config.decoder_start_token_id == 2 and hf.config.decoder.is_decoder
    assert_same_outputs(model, hf, padded_batch(VOCAB), **_decoder_inputs())


def test_to_hf_names_what_bert2bert_cannot_express(tmp_path):
    cfg = pf.Config.preset(
        "bert",
        vocab_size=VOCAB,
        d_model=32,
        n_layers=1,
        n_heads=4,
        d_ff=40,
        arch="encoder_decoder",
        head="seq2seq_lm",
        hf_model_type="encoder-decoder",
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="separate_decoder_embeddings=False.*head_transform=False"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)


@pytest.mark.parametrize(
    "config, feature",
    [
        (lambda: _config(decoder={"add_cross_attention": False}), "decoder.add_cross_attention=False"),
        (lambda: _config(encoder={"is_decoder": True}), "encoder.is_decoder"),
        (lambda: _config(tie_encoder_decoder=True), "tie_encoder_decoder=True"),
        (
            lambda: _config(decoder={"hidden_size": 48, "num_attention_heads": 4}),
            "decoder.hidden_size=48 different from encoder.hidden_size=32 .*enc_to_dec_proj",
        ),
        (lambda: _config(decoder={"intermediate_size": 48}), "decoder.intermediate_size=48 different"),
        (lambda: _config(decoder={"position_embedding_type": "relative_key"}), "decoder.position_embedding_type"),
        (lambda: _config(decoder={"hidden_act": "tanh"}), "decoder: bert checkpoint uses hidden_act='tanh'"),
        (
            lambda: EncoderDecoderConfig.from_encoder_decoder_configs(
                RobertaConfig(**SIZES), BertConfig(**SIZES, is_decoder=True, add_cross_attention=True)
            ),
            "encoder.model_type='roberta'",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_unsupported_features_are_named(tmp_path, config, feature):
    config().save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=feature):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"qk_norm": True}, "qk_norm=True"),
        ({"sliding_window": 4}, "sliding_window=4"),
        ({"query_temperature": {"scale": 0.1, "floor_size": 4}}, "query_temperature="),
        ({"head_transform_bias": False}, "head_transform_bias=False"),
    ],
)
def test_to_hf_refuses_what_bert2bert_cannot_express(tmp_path, changes, name):
    """Fields BertConfig has no key for, in either stack: every layer one full attention without QK-norm."""
    cfg = pf.from_hf(save_hf(_bert2bert(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
