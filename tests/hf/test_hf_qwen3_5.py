"""Qwen3.5's text model (qwen3_5_text) against transformers 5.x: three gated DeltaNet layers and one gated attention
layer with interleaved M-RoPE on part of each head, dense SwiGLU feed-forwards; logits on a padded batch at 11
tokens and at 150 (past two of the DeltaNet's chunks of 64), and with position ids with axes (text around an
image); a round trip; greedy generation equal to HF's; the text weights of a vision-language checkpoint and its
multi-token prediction weights read as transformers reads them; refusals by name. transformers 4.57.6 has no
Qwen3.5: there every test against it is skipped (the hf5 suite runs them), and an export for 4.57.6 is refused."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import posformer as pf
from hf_oracle import assert_generates_hf_tokens, assert_same_outputs, check_family, padded_batch, save_hf

QWEN3_5 = hasattr(transformers, "Qwen3_5TextConfig")
needs_qwen3_5 = pytest.mark.skipif(not QWEN3_5, reason=f"transformers {transformers.__version__} has no Qwen3.5")
if QWEN3_5:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3_5TextModel

SECTION = [2, 2, 2]  # head_dim 24, partial_rotary_factor 0.5: 6 rotary pairs
ROPE = {"rope_type": "default", "rope_theta": 100.0, "partial_rotary_factor": 0.5, "mrope_section": SECTION}
SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=24,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=6,
    max_position_embeddings=256,
    initializer_range=0.2,
    rope_parameters=ROPE,
)


@torch.no_grad()
def _qwen3_5(model_class=None, **changes):
    """Every norm, dt_bias and bias a random draw, and decays per token near 0.97 (see test_hf_qwen3_next)."""
    torch.manual_seed(0)
    hf = (model_class or Qwen3_5ForCausalLM)(
        Qwen3_5TextConfig(**{**SIZES, **changes}, attn_implementation="eager")
    ).eval()
    for name, param in hf.named_parameters():
        if name.endswith("A_log"):
            param.uniform_(-4.5, -3.0)
        elif name.endswith("dt_bias") or name.endswith("bias"):
            param.normal_(0.5 if name.endswith("dt_bias") else 0.0, 0.5)
        elif "norm" in name:
            param.normal_(1.0 if ".linear_attn.norm" in name else 0.0, 0.5)
    return hf


@needs_qwen3_5
@pytest.mark.parametrize(
    "changes, length",
    [
        ({}, 11),
        ({}, 150),
        ({"attention_bias": True, "tie_word_embeddings": True}, 11),
        ({"layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention"]}, 11),
    ],
    ids=["default", "past-two-chunks", "biases-tied", "mixed-layers"],
)
def test_against_hf_qwen3_5(tmp_path, changes, length):
    model = check_family(_qwen3_5(**changes), Qwen3_5ForCausalLM, tmp_path, padded_batch(97, length=length))
    params = model.cfg.position_params
    assert (params["mrope_section"], params["mrope_interleaved"], params["rotary_fraction"]) == (SECTION, True, 0.5)
    assert model.cfg.n_experts is None and model.cfg.attention_output_gate


@needs_qwen3_5
def test_against_hf_qwen3_5_base_model(tmp_path):
    model = check_family(_qwen3_5(Qwen3_5TextModel), Qwen3_5TextModel, tmp_path, padded_batch(97), "last_hidden_state")
    assert model.head is None


def _image_batch() -> dict:
    """Two rows of 3 text tokens, a 2 x 3 image and 3 text tokens, the second left-padded by 2 (pads hold ids 0):
    ids, mask and position ids with axes (3, 2, 12), each row's counted from its first real token."""
    real = pf.positions.image_position_ids(3, 2, 3, 3)  # (3, 12)
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    pos = torch.stack([real, torch.cat([real.new_ones(3, 2), real[:, :10]], dim=1)], dim=1)
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask, "position_ids": pos}


@needs_qwen3_5
@torch.no_grad()
def test_against_hf_qwen3_5_with_image_position_ids(tmp_path):
    """The axes change HF's logits (so the test sees M-RoPE's sections), and ours follow."""
    hf = _qwen3_5()
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = _image_batch()
    as_text = {**batch, "position_ids": batch["position_ids"][0]}
    keep = batch["attention_mask"].bool()
    assert (hf(**batch).logits - hf(**as_text).logits).abs()[keep].max() > 1e-2
    assert_same_outputs(model, hf, batch)


@needs_qwen3_5
def test_the_default_section_is_transformers_default(tmp_path):
    """A config without mrope_section gets [11, 11, 10] as transformers gives it (heads of 256, a quarter rotated)."""
    hf = _qwen3_5(head_dim=256, rope_parameters={"rope_type": "default", "rope_theta": 100.0})
    model = pf.from_hf(save_hf(hf, tmp_path))
    params = model.cfg.position_params
    assert (params["mrope_section"], params["rotary_fraction"]) == ([11, 11, 10], 0.25)
    assert_same_outputs(model, hf, _image_batch())


@needs_qwen3_5
def test_qwen3_5_generates_hf_tokens(tmp_path):
    """From a full and a left-padded prompt, with the cache, at 6 tokens and at 70 (past a chunk)."""
    hf = _qwen3_5(attention_bias=True)
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert_generates_hf_tokens(model, hf, 97, lengths=(6, 70))


@needs_qwen3_5
def test_qwen3_5_reads_a_vision_language_checkpoints_text_weights(tmp_path):
    """Text weights under `model.language_model.`, a vision tower under `model.visual.` and multi-token prediction
    weights under `mtp.`: transformers' Qwen3_5ForCausalLM loads the text model alone, posformer too."""
    hf = _qwen3_5()
    save_hf(hf, tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    renamed = {key.replace("model.", "model.language_model.", 1): value for key, value in state.items()}
    extra = {"model.visual.patch_embed.proj.weight": torch.randn(8, 3), "mtp.fc.weight": torch.randn(32, 64)}
    save_file({**renamed, **extra}, tmp_path / "model.safetensors")
    reloaded = Qwen3_5ForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert_same_outputs(pf.from_hf(tmp_path), reloaded, padded_batch(97))


@needs_qwen3_5
def test_qwen3_5_writes_rope_parameters(tmp_path):
    pf.to_hf(pf.from_hf(save_hf(_qwen3_5(), tmp_path / "hf")), tmp_path / "out")
    out = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "rope_theta" not in out and "partial_rotary_factor" not in out
    assert out["rope_parameters"] == {**ROPE, "mrope_interleaved": True}
    assert out["architectures"] == ["Qwen3_5ForCausalLM"] and out["layer_types"][3] == "full_attention"


@needs_qwen3_5
@pytest.mark.parametrize(
    "keys, name",
    [
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"rope_parameters": {**ROPE, "mrope_section": [4, 4, 4]}}, "mrope_section"),
        ({"layer_types": ["linear_attention"] * 3 + ["sliding_attention"]}, "layer_types"),
    ],
    ids=lambda value: str(value),
)
def test_unsupported_qwen3_5_configs_are_refused_by_name(tmp_path, keys, name):
    save_hf(_qwen3_5(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **keys}))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=name):
        pf.from_hf(tmp_path)


@needs_qwen3_5
@pytest.mark.parametrize(
    "changes, name",
    [
        ({"position_params": {"theta": 100.0, "layout": "half", "rotary_fraction": 0.5}}, "mrope_section"),
        ({"n_experts": 4, "experts_per_token": 2}, "n_experts"),
        ({"attention_output_gate": False}, "attention_output_gate"),
    ],
)
def test_to_hf_refuses_what_qwen3_5_cannot_express(tmp_path, changes, name):
    model = pf.from_hf(save_hf(_qwen3_5(), tmp_path / "hf"))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=name):
        pf.to_hf(pf.Transformer(model.cfg.replace(**changes)), tmp_path / "out")


def test_an_export_for_transformers_4_is_refused(tmp_path):
    """transformers 4.57.6 has no Qwen3.5: an export for it would not load; one for 5 is written."""
    cfg = pf.Config(
        arch="decoder", vocab_size=97, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_head=24, d_ff=40,
        position="rope", position_params={"theta": 100.0, "layout": "half", "rotary_fraction": 0.5,
        "mrope_section": SECTION, "mrope_interleaved": True}, norm="rmsnorm_unit_offset", norm_eps=1e-6,
        activation="swiglu", qkv_bias=False, attn_out_bias=False, ffn_bias=False, qk_norm=True,
        attention_output_gate=True, layer_types=["linear_attention"] * 3 + ["full_attention"],
        layer_settings={"linear_attention": {"mixer": "gated_deltanet"}}, tie_embeddings=False,
        gated_deltanet={"key_heads": 2, "value_heads": 4, "key_dim": 8, "value_dim": 6}, hf_model_type="qwen3_5_text",
    )  # fmt: skip
    model = pf.Transformer(cfg)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="transformers 5 only"):
        pf.to_hf(model, tmp_path / "for4", transformers_version="4.57.6")
    assert not (tmp_path / "for4").exists()
    pf.to_hf(model, tmp_path / "for5", transformers_version="5.24.0")
    assert json.loads((tmp_path / "for5" / "config.json").read_text())["model_type"] == "qwen3_5_text"
