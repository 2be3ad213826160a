"""BLOOM against transformers 4.57.6: ALiBi (power-of-two and other head counts), embedding LayerNorm,
per-head fused q/k/v, tied and untied heads."""

from __future__ import annotations

import pytest
import torch
from transformers import BloomConfig, BloomForCausalLM, BloomModel

import posformer as pf
from hf_noise import perturb_constants
from hf_oracle import PLAIN_DECODER_REFUSALS, assert_to_hf_refuses, check_family, padded_batch, save_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    n_layer=2,
    n_head=4,
    initializer_range=0.2,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    attn_implementation="eager",
)


def _bloom(cls=BloomForCausalLM, **changes):
    torch.manual_seed(0)
    return perturb_constants(cls(BloomConfig(**{**SIZES, **changes})))


def test_against_hf_bloom(tmp_path):
    model = check_family(_bloom(), BloomForCausalLM, tmp_path, padded_batch(97))
    cfg = model.cfg
    assert cfg.position == "alibi" and cfg.embed_norm and cfg.ff_dim == 128
    assert model.head.proj.weight is model.embed_tokens.weight


@pytest.mark.parametrize("n_head", [6, 12], ids=lambda n: f"{n}_heads")
def test_against_hf_bloom_heads_not_power_of_two(tmp_path, n_head):
    check_family(_bloom(hidden_size=8 * n_head, n_head=n_head), BloomForCausalLM, tmp_path, padded_batch(97))


def test_against_hf_bloom_untied_tp(tmp_path):
    hf = _bloom(tie_word_embeddings=False, pretraining_tp=2)  # without slow_but_exact, tp changes nothing
    model = check_family(hf, BloomForCausalLM, tmp_path, padded_batch(97))
    assert model.head.proj.weight is not model.embed_tokens.weight


def test_against_hf_bloom_base_model(tmp_path):
    model = check_family(_bloom(BloomModel), BloomModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


@pytest.mark.parametrize(
    "feature",
    [{"apply_residual_connection_post_layernorm": True}, {"slow_but_exact": True, "pretraining_tp": 2}],
    ids=["post_ln_residual", "tp"],
)
def test_bloom_unsupported_features_are_refused(tmp_path, feature):
    BloomConfig(**SIZES, **feature).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=next(iter(feature))):
        pf.from_hf(tmp_path)


def test_bloom_export_needs_the_embedding_norm(tmp_path):
    cfg = pf.Config(
        vocab_size=97,
        d_model=32,
        n_layers=1,
        n_heads=4,
        d_ff=128,
        position="alibi",
        activation="gelu_tanh",
        hf_model_type="bloom",
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="embed_norm=False"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)


@pytest.mark.parametrize("changes, name", PLAIN_DECODER_REFUSALS)
def test_to_hf_refuses_what_bloom_cannot_express(tmp_path, changes, name):
    """Fields BloomConfig has no key for: every layer one full attention without QK-norm, a plain LM head."""
    cfg = pf.from_hf(save_hf(_bloom(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
