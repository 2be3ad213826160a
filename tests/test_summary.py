"""`posformer info`: parameter counts equal Hugging Face's for the same architecture."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.summary import describe, flops_per_token, parameters_by_component

transformers = pytest.importorskip("transformers")


def count_on_meta(build) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in build().parameters())


def ours(name: str) -> int:
    return count_on_meta(lambda: pf.Transformer(pf.Config.preset(name)))


def test_bert_preset_has_bert_base_mlm_parameter_count() -> None:
    config = transformers.BertConfig()  # bert-base-uncased defaults
    assert ours("bert") == count_on_meta(lambda: transformers.BertForMaskedLM(config))


def test_gpt2_preset_has_gpt2_small_parameter_count() -> None:
    config = transformers.GPT2Config()
    assert ours("gpt2") == count_on_meta(lambda: transformers.GPT2LMHeadModel(config))


def test_llama_preset_has_llama2_7b_parameter_count() -> None:
    config = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
    )
    assert ours("llama") == count_on_meta(lambda: transformers.LlamaForCausalLM(config)) == 6_738_415_616


def test_components_add_up_and_tied_weights_count_once() -> None:
    cfg = pf.Config(arch="decoder", vocab_size=100, d_model=32, n_layers=2, n_heads=4, position="learned")
    model = pf.Transformer(cfg)
    counts = parameters_by_component(model)
    assert sum(counts.values()) == sum(p.numel() for p in model.parameters())
    assert counts["position encoding"] == cfg.max_positions * cfg.d_model
    assert "head" not in counts  # tied to the embeddings


def test_flops_follow_the_counting_rule() -> None:
    cfg = pf.Config(
        arch="decoder",
        vocab_size=100,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=64,
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        activation="relu",
    )
    model = pf.Transformer(cfg)
    per_layer = 4 * 32 * 32 + 2 * 32 * 64
    flops = flops_per_token(model, context=10)
    assert flops["dense"] == 2 * (2 * per_layer + 100 * 32)
    assert flops["attention"] == 4 * 2 * 10 * 32


def test_describe_names_the_parts() -> None:
    text = describe(pf.Config.preset("llama"))
    assert "rope" in text and "6,738,415,616" in text and "FLOPs per token" in text


def test_the_summary_lists_each_layer_type_with_its_count_and_settings() -> None:
    cfg = pf.Config(
        arch="decoder",
        n_layers=6,
        position="rope",
        layer_types=["local"] * 5 + ["full_attention"],
        layer_settings={"local": {"sliding_window": 512}},
    )
    lines = describe(cfg).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("position"))
    assert lines[start + 1].split() == ["local", "x5:", "{'sliding_window':", "512}"]
    assert lines[start + 2].split() == ["full_attention", "x1:", "the", "config's", "own", "settings"]
