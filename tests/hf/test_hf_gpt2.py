"""GPT-2 against transformers 4.57.6: LM and base model, Conv1D transposes, tied and untied heads, the preset."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

import posformer as pf
from hf_noise import perturb_constants
from hf_oracle import (
    PLAIN_DECODER_REFUSALS,
    assert_same_outputs,
    assert_to_hf_refuses,
    check_family,
    padded_batch,
    round_trip,
    save_hf,
)

SIZES = dict(
    vocab_size=97,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_positions=64,
    initializer_range=0.2,
    bos_token_id=1,
    eos_token_id=2,
    attn_implementation="eager",
)


def _gpt2(cls=GPT2LMHeadModel, **changes):
    torch.manual_seed(0)
    return perturb_constants(cls(GPT2Config(**{**SIZES, **changes})))


def test_against_hf_gpt2(tmp_path):
    model = check_family(_gpt2(), GPT2LMHeadModel, tmp_path, padded_batch(97))
    assert model.cfg.position == "learned" and model.cfg.activation == "gelu_tanh" and model.cfg.ff_dim == 128
    assert model.head.proj.weight is model.embed_tokens.weight


def test_against_hf_gpt2_base_model(tmp_path):
    model = check_family(_gpt2(GPT2Model), GPT2Model, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


def test_against_hf_gpt2_untied_n_inner_unscaled_reordered(tmp_path):
    hf = _gpt2(
        tie_word_embeddings=False,
        n_inner=40,
        activation_function="relu",
        scale_attn_weights=False,
        reorder_and_upcast_attn=True,
    )
    model = check_family(hf, GPT2LMHeadModel, tmp_path, padded_batch(97))
    assert model.head.proj.weight is not model.embed_tokens.weight and model.cfg.attn_scale == 1.0


def test_gpt2_old_checkpoint_mask_buffers_are_ignored(tmp_path):
    hf = _gpt2()
    hf.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["transformer.h.0.attn.bias"] = torch.ones(1, 1, 64, 64)
    state["transformer.h.0.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    assert_same_outputs(pf.from_hf(tmp_path), hf, padded_batch(97))


@pytest.mark.parametrize("feature", ["scale_attn_by_inverse_layer_idx", "add_cross_attention"])
def test_gpt2_unsupported_features_are_refused(tmp_path, feature):
    GPT2Config(**SIZES, **{feature: True}).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=feature):
        pf.from_hf(tmp_path)


def test_gpt2_preset_exports(tmp_path):
    cfg = pf.Config.preset(
        "gpt2",
        vocab_size=97,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=64,
        max_positions=64,
        bos_token_id=1,
        eos_token_id=2,
        dropout=0.0,
        attention_dropout=0.0,
        init_std=0.2,
    )
    assert cfg.hf_model_type == "gpt2"
    model = perturb_constants(pf.Transformer(cfg)).eval()
    hf = round_trip(model, GPT2LMHeadModel, tmp_path)
    assert_same_outputs(model, hf, padded_batch(97))


def test_gpt2_export_refuses_rope(tmp_path):
    cfg = pf.Config.preset(
        "gpt2", vocab_size=97, d_model=32, n_layers=1, n_heads=4, position="rope", bos_token_id=1, eos_token_id=2
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="position='rope'"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)


@pytest.mark.parametrize("changes, name", PLAIN_DECODER_REFUSALS)
def test_to_hf_refuses_what_gpt2_cannot_express(tmp_path, changes, name):
    """Fields GPT2Config has no key for: every layer one full attention without QK-norm, a plain LM head."""
    cfg = pf.from_hf(save_hf(_gpt2(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
