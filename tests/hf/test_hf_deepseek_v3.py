"""DeepSeek-V3 (dense layers) against transformers 4.57.6 and 5: multi-head latent attention with and without a
query latent, interleaved and half RoPE, YaRN with DeepSeek's mscale on the softmax scale (v4's `rope_scaling`, v5's
`rope_parameters`); logits on padded batches (full, right- and left-padded rows), a round trip, greedy generation
token for token against HF's, and the features refused by name."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, DeepseekV3Model

import posformer as pf
from hf_oracle import TRANSFORMERS_5, assert_same_outputs, check_family, padded_batch, save_hf
from posformer.hf.deepseek_v3 import config_to_hf

VOCAB = 97
SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=8,
    first_k_dense_replace=2,
    max_position_embeddings=64,
    initializer_range=0.2,
    rope_theta=100.0,
)
YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 0.7}


@torch.no_grad()
def _deepseek(model_class=DeepseekV3ForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(DeepseekV3Config(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts every norm weight at one; make a swapped one show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    return hf


@pytest.mark.parametrize("q_lora_rank", [24, None], ids=["q_latent", "q_proj"])
@pytest.mark.parametrize("rope_interleave", [True, False], ids=["interleaved", "half"])
def test_against_hf_deepseek_v3(tmp_path, q_lora_rank, rope_interleave):
    hf = _deepseek(q_lora_rank=q_lora_rank, rope_interleave=rope_interleave)
    model = check_family(hf, DeepseekV3ForCausalLM, tmp_path, padded_batch(VOCAB, length=20))
    assert model.cfg.latent_attention == {"q_lora_rank": q_lora_rank, "kv_lora_rank": 16, "nope_dim": 8, "v_dim": 8}
    assert model.cfg.head_dim == 8 and model.cfg.scale == 16**-0.5
    assert model.cfg.position_params["layout"] == ("interleaved" if rope_interleave else "half")


def test_against_hf_deepseek_v3_yarn_with_mscale(tmp_path):
    """YaRN past the original 16 positions: frequencies and cos/sin factor mscale / mscale_all_dim, and the
    softmax scale times mscale(4, 0.7) ** 2."""
    hf = _deepseek(rope_scaling=dict(YARN))
    assert hf.model.layers[0].self_attn.scaling != 16**-0.5
    model = check_family(hf, DeepseekV3ForCausalLM, tmp_path, padded_batch(VOCAB, length=40))
    assert model.cfg.attn_scale == hf.model.layers[0].self_attn.scaling
    assert model.cfg.position_params["scaling"]["type"] == "yarn"


def test_against_hf_deepseek_v3_yarn_without_mscale_all_dim(tmp_path):
    """YaRN's own cos/sin factor 0.1 ln(factor) + 1, the softmax scale left at qk_head_dim ** -0.5."""
    hf = _deepseek(rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})
    model = check_family(hf, DeepseekV3ForCausalLM, tmp_path, padded_batch(VOCAB, length=40))
    assert model.cfg.attn_scale is None


def test_against_hf_deepseek_v3_biases_untied_base_model(tmp_path):
    """attention_bias on q_a_proj / kv_a_proj_with_mqa / o_proj; the base model's hidden states."""
    hf = _deepseek(DeepseekV3Model, attention_bias=True, q_lora_rank=None)
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
    model = check_family(hf, DeepseekV3Model, tmp_path, padded_batch(VOCAB, length=20), field="last_hidden_state")
    assert model.cfg.qkv_bias and model.cfg.attn_out_bias and model.cfg.head_kind == "none"


@pytest.mark.parametrize("scaling", [None, YARN], ids=["rope", "yarn"])
def test_deepseek_v3_generates_hf_tokens(tmp_path, scaling):
    """Greedy decoding over posformer's latent cache (the absorbed form) gives HF's tokens, full and left-padded,
    and the tokens of greedy decoding by full passes without a cache."""
    hf = _deepseek(rope_scaling=None if scaling is None else dict(scaling))
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = {key: value[[0, 2]] for key, value in padded_batch(VOCAB, length=12).items()}
    expected = hf.generate(**batch, max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(model.generate(**batch, max_new_tokens=10, eos_token_id=[]), expected)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        for _ in range(10):
            step = model(ids, attention_mask=mask).logits[:, -1].argmax(-1, keepdim=True)
            ids, mask = torch.cat((ids, step), 1), torch.cat((mask, torch.ones_like(step)), 1)
    assert torch.equal(ids, expected)


def test_deepseek_v3_writes_its_own_fields_back(tmp_path):
    model = pf.from_hf(save_hf(_deepseek(q_lora_rank=None, rope_scaling=dict(YARN)), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["q_lora_rank"], hf["kv_lora_rank"], hf["qk_rope_head_dim"]) == (None, 16, 8)
    assert (hf["qk_nope_head_dim"], hf["v_head_dim"], hf["first_k_dense_replace"]) == (8, 8, 2)
    assert hf["rope_interleave"] and hf["rope_scaling"]["mscale_all_dim"] == 0.7
    assert hf["max_position_embeddings"] == 64 and hf["rope_scaling"]["original_max_position_embeddings"] == 16


def test_deepseek_v3_reads_mscale_from_rope_parameters(tmp_path):
    """v5's form (`rope_parameters` with YaRN's mscale and mscale_all_dim) gives the softmax scale v4's form gives;
    transformers 5 loads it with the same logits. A `rope_type` of "default" there leaves the scale alone."""
    model = pf.from_hf(save_hf(_deepseek(rope_scaling=dict(YARN)), tmp_path / "hf"))
    pf.to_hf(model, tmp_path / "v5", rope_parameters=True)
    written = json.loads((tmp_path / "v5" / "config.json").read_text())
    assert written["rope_parameters"]["mscale_all_dim"] == 0.7 and "rope_scaling" not in written
    again = pf.from_hf(tmp_path / "v5")
    assert again.cfg == model.cfg and model.cfg.attn_scale is not None
    if TRANSFORMERS_5:
        reloaded = DeepseekV3ForCausalLM.from_pretrained(tmp_path / "v5", attn_implementation="eager").eval()
        assert reloaded.model.layers[0].self_attn.scaling == model.cfg.attn_scale
        assert_same_outputs(again, reloaded, padded_batch(VOCAB, length=40))
    default = {"rope_type": "default", "rope_theta": 100.0, "factor": 4.0, "mscale_all_dim": 0.7}
    (tmp_path / "v5" / "config.json").write_text(json.dumps({**written, "rope_parameters": default}))
    assert pf.from_hf(tmp_path / "v5").cfg.attn_scale is None


@pytest.mark.parametrize(
    "feature, match",
    [
        ({"first_k_dense_replace": 1}, "first_k_dense_replace=1"),
        ({"num_key_value_heads": 2}, "num_key_value_heads=2"),
        ({"hidden_act": "gelu_new"}, "hidden_act"),
        ({"architectures": ["DeepseekV3ForSequenceClassification"]}, "DeepseekV3ForSequenceClassification"),
    ],
    ids=["moe_layers", "kv_heads", "hidden_act", "head"],
)
def test_unsupported_deepseek_v3_features_are_refused_by_name(tmp_path, feature, match):
    DeepseekV3Config(**{**SIZES, **feature}).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=match):
        pf.from_hf(tmp_path)


def test_to_hf_refuses_what_deepseek_v3_cannot_express(tmp_path):
    model = pf.from_hf(save_hf(_deepseek(rope_scaling=dict(YARN)), tmp_path / "hf"))
    scaled = pf.Transformer(model.cfg.replace(attn_scale=0.3))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="attn_scale=0.3"):
        pf.to_hf(scaled, tmp_path / "scaled")
    plain = model.cfg.replace(latent_attention=None, d_head=None, attn_scale=None)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="latent_attention=None"):
        pf.to_hf(pf.Transformer(plain), tmp_path / "plain")
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="latent_attention=.*llama's attention is not"):
        pf.to_hf(pf.Transformer(model.cfg.replace(hf_model_type="llama")), tmp_path / "llama")


@pytest.mark.parametrize("arch", ["encoder", "encoder_decoder"])
def test_deepseek_v3_export_names_an_arch_other_than_decoder(tmp_path, arch):
    """DeepseekV3Model is a causal decoder: the export names `arch` itself, not only through Config's own rule that
    latent attention is a decoder's (which refuses the other archs today)."""
    cfg = pf.from_hf(save_hf(_deepseek(), tmp_path)).cfg
    cfg.arch = arch  # set past `Config.validate`, so that the family's own check is what answers
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=f"arch='{arch}'"):
        config_to_hf(cfg)
