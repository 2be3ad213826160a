"""When a model's position encoding is what stops its export, `to_hf` names the Hugging Face families that hold
the encoding (`hf.position_holders`, derived from each family's own config mapping), or says that none does.

The oracle is transformers' own modeling code: each family named as a holder builds that encoding there (BLOOM's
`build_alibi_tensor`, T5's `_relative_position_bucket`, Marian's sinusoidal table, Llama's rotary embedding,
GPT-2's learned `wpe`), and no transformers model implements FIRE, KERPLE or xPos."""

from __future__ import annotations

import importlib

import pytest

import posformer as pf
from posformer.hf import UnsupportedCheckpoint
from posformer.hf.position_holders import holders

# encoding -> (a model type posformer writes, the transformers module and the attribute that builds the encoding)
BUILT_BY_TRANSFORMERS = {
    "alibi": ("bloom", "transformers.models.bloom.modeling_bloom", "build_alibi_tensor"),
    "t5": ("t5", "transformers.models.t5.modeling_t5", "T5Attention._relative_position_bucket"),
    "sinusoidal": ("marian", "transformers.models.marian.modeling_marian", "MarianSinusoidalPositionalEmbedding"),
    "rope": ("llama", "transformers.models.llama.modeling_llama", "LlamaRotaryEmbedding"),
    "learned": ("gpt2", "transformers.models.gpt2.modeling_gpt2", "GPT2Model"),
}
TINY = dict(vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_ff=64)


@pytest.mark.parametrize("position", sorted(BUILT_BY_TRANSFORMERS))
def test_the_family_transformers_builds_an_encoding_in_holds_it(position: str) -> None:
    model_type, module, attribute = BUILT_BY_TRANSFORMERS[position]
    found = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    if position == "learned":
        assert "wpe" in found.__init__.__code__.co_names  # GPT-2's table of learned absolute positions
    assert model_type in holders(position)


def test_rope_is_held_by_the_rope_decoders_and_not_by_the_absolute_or_bias_ones() -> None:
    found = set(holders("rope"))
    assert {"llama", "mistral", "qwen2", "gpt_neox"} <= found
    assert not found & {"gpt2", "bert", "t5", "bloom", "marian"}


@pytest.mark.parametrize("position", ["fire", "kerple", "xpos"])
def test_an_encoding_no_transformers_model_implements_has_no_holder(position: str) -> None:
    assert holders(position) == []


def test_to_hf_of_an_alibi_llama_names_bloom_whichever_way_the_family_is_chosen(tmp_path) -> None:
    cfg = pf.Config.preset("llama", **TINY).replace(position="alibi")
    named = r"the Hugging Face families that hold position 'alibi': bloom"
    with pytest.raises(UnsupportedCheckpoint, match=r"to_hf: llama checkpoints cannot hold position 'alibi'; " + named):
        pf.to_hf(pf.Transformer(cfg.replace(hf_model_type="llama")), tmp_path / "a")
    with pytest.raises(UnsupportedCheckpoint, match=r"hf_model_type 'llama' cannot write this model: llama .*" + named):
        pf.to_hf(pf.Transformer(cfg), tmp_path / "b", hf_model_type="llama")
    inferred = r"no Hugging Face family writes this model .*Its position: "
    with pytest.raises(UnsupportedCheckpoint, match=inferred + named):
        pf.to_hf(pf.Transformer(cfg), tmp_path / "c")


def test_to_hf_of_an_encoding_no_family_holds_says_so() -> None:
    cfg = pf.Config(arch="decoder", position="fire", **TINY)
    with pytest.raises(UnsupportedCheckpoint, match=r"no Hugging Face family posformer writes holds position 'fire'"):
        pf.to_hf(pf.Transformer(cfg), "unused")


def test_a_family_that_holds_the_encoding_keeps_its_own_reason(tmp_path) -> None:
    cfg = pf.Config.preset("llama", **TINY).replace(norm="layernorm", hf_model_type="llama")  # RoPE, held by llama
    with pytest.raises(UnsupportedCheckpoint) as refused:
        pf.to_hf(pf.Transformer(cfg), tmp_path / "x")
    assert "cannot hold position" not in str(refused.value) and "layout other than" in str(refused.value)
