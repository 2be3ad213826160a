"""LLaMA, Mistral and Qwen2 against transformers 4.57.6: logits, GQA, biases and every RoPE scaling."""

from __future__ import annotations

import pytest
import torch
from hf_oracle import check_family, padded_batch
from transformers import (
    LlamaConfig, LlamaForCausalLM, LlamaModel, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
)

import posformer as pf

SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.2)


def _llama(**changes) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**SIZES, **changes}, attn_implementation="eager"))


def test_against_hf_llama(tmp_path):
    model = check_family(_llama(), LlamaForCausalLM, tmp_path, padded_batch(97))
    assert model.cfg.kv_heads == 2 and model.cfg.position == "rope"


def test_against_hf_llama_mha_tied_biases(tmp_path):
    hf = _llama(num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True, mlp_bias=True)
    model = check_family(hf, LlamaForCausalLM, tmp_path, padded_batch(97))
    assert model.head.proj.weight is model.embed_tokens.weight


def test_against_hf_llama_mqa_head_dim(tmp_path):
    check_family(_llama(num_key_value_heads=1, head_dim=16), LlamaForCausalLM, tmp_path, padded_batch(97))


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "dynamic", "factor": 2.0},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "yarn", "factor": 2.0, "beta_fast": 16, "beta_slow": 2},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8},
], ids=lambda s: s.get("rope_type", s.get("type")))
def test_against_hf_llama_rope_scaling(tmp_path, scaling):
    changes = {"rope_scaling": scaling, "rope_theta": 500.0}
    if scaling.get("original_max_position_embeddings"):
        changes["max_position_embeddings"] = int(scaling["original_max_position_embeddings"] * scaling["factor"])
    if scaling.get("rope_type") == "dynamic":
        changes["max_position_embeddings"] = 8  # the batch (11 tokens) is longer: the dynamic base grows
    check_family(_llama(**changes), LlamaForCausalLM, tmp_path, padded_batch(97))


def test_rope_parameters_v5_form_is_read():
    from posformer.hf.rope import rope_params

    v5 = {"model_type": "llama", "max_position_embeddings": 64,
          "rope_parameters": {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}}
    assert rope_params(v5) == {"theta": 500.0, "layout": "half", "scaling": {"type": "linear", "factor": 2.0}}
    v4 = {"model_type": "llama", "max_position_embeddings": 64, "rope_theta": 500.0,
          "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert rope_params(v4) == rope_params(v5)


def test_against_hf_llama_base_model(tmp_path):
    torch.manual_seed(0)
    hf = LlamaModel(LlamaConfig(**SIZES, attn_implementation="eager"))
    model = check_family(hf, LlamaModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


def test_against_hf_mistral(tmp_path):
    torch.manual_seed(0)
    hf = MistralForCausalLM(MistralConfig(**SIZES, sliding_window=None, attn_implementation="eager"))
    check_family(hf, MistralForCausalLM, tmp_path, padded_batch(97))


def test_against_hf_qwen2_qkv_bias(tmp_path):
    torch.manual_seed(0)
    hf = Qwen2ForCausalLM(Qwen2Config(**SIZES, attn_implementation="eager"))
    with torch.no_grad():  # HF initialises biases to zero; make them matter
        for layer in hf.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    model = check_family(hf, Qwen2ForCausalLM, tmp_path, padded_batch(97))
    assert model.cfg.qkv_bias and not model.cfg.attn_out_bias


def test_mistral_sliding_window_is_refused(tmp_path):
    torch.manual_seed(0)
    hf = MistralForCausalLM(MistralConfig(**SIZES, sliding_window=16))
    hf.save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="sliding-window attention"):
        pf.from_hf(tmp_path)
