"""Phi-3 against transformers 4.57.6: logits (fused projections, partial rotary, sliding window, LongRoPE on both
sides of its switch), the round trip, and greedy generation across the switch."""

from __future__ import annotations

import pytest
import torch
from transformers import Phi3Config, Phi3ForCausalLM, Phi3Model

import posformer as pf
from hf_oracle import assert_to_hf_refuses, check_family, padded_batch, save_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    original_max_position_embeddings=64,
    initializer_range=0.2,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
ORIGINAL = 8  # LongRoPE's switch: the 11-token batch is past it, a 6-token one before it


def _phi3(**changes) -> Phi3ForCausalLM:
    torch.manual_seed(0)
    hf = Phi3ForCausalLM(Phi3Config(**{**SIZES, **changes}, attn_implementation="eager"))
    with torch.no_grad():  # HF initialises norm weights to one; make a swapped one show
        for name, param in hf.named_parameters():
            if "norm" in name:
                param.normal_(1.0, 0.3)
    return hf.eval()


def _longrope(rotary_dim: int) -> dict:
    g = torch.Generator().manual_seed(1)
    return dict(
        max_position_embeddings=4 * ORIGINAL,
        original_max_position_embeddings=ORIGINAL,
        rope_scaling={
            "type": "longrope",
            "short_factor": (1 + torch.rand(rotary_dim // 2, generator=g)).tolist(),
            "long_factor": (1 + 20 * torch.rand(rotary_dim // 2, generator=g)).tolist(),
        },
    )


def test_against_hf_phi3(tmp_path):
    model = check_family(_phi3(), Phi3ForCausalLM, tmp_path, padded_batch(97))
    assert model.cfg.position_params["scaling"] is None and model.cfg.sliding_window is None


def test_against_hf_phi3_partial_rotary_and_sliding_window(tmp_path):
    model = check_family(
        _phi3(partial_rotary_factor=0.5, sliding_window=4), Phi3ForCausalLM, tmp_path, padded_batch(97)
    )
    assert model.cfg.position_params["rotary_fraction"] == 0.5 and model.cfg.sliding_window == 4


@pytest.mark.parametrize("length", [6, 11], ids=["short-factors", "long-factors"])
def test_against_hf_phi3_longrope_on_both_sides_of_the_switch(tmp_path, length):
    model = check_family(_phi3(**_longrope(8)), Phi3ForCausalLM, tmp_path, padded_batch(97, length=length))
    scaling = model.cfg.position_params["scaling"]
    assert scaling["type"] == "longrope" and scaling["factor"] == 4.0
    assert scaling["original_max_position_embeddings"] == ORIGINAL


def test_against_hf_phi3_base_model_longrope_partial(tmp_path):
    torch.manual_seed(0)
    hf = Phi3Model(Phi3Config(**{**SIZES, **_longrope(4)}, partial_rotary_factor=0.5, attn_implementation="eager"))
    check_family(hf, Phi3Model, tmp_path, padded_batch(97), field="last_hidden_state")


def _left_padded(length: int) -> dict:
    return {key: value[[0, 2]] for key, value in padded_batch(97, length=length).items()}  # full, left-padded


@pytest.mark.parametrize("length", [3, 10], ids=["short-factors", "long-factors"])
def test_phi3_longrope_generates_hf_tokens_on_each_side_of_the_switch(tmp_path, length):
    """3 + 5 tokens stay within the original length, 10 + 5 start past it: HF's `generate` tokens."""
    hf = _phi3(**_longrope(8))
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = _left_padded(length)
    expected = hf.generate(**batch, max_new_tokens=5, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(model.generate(**batch, max_new_tokens=5, eos_token_id=[]), expected)


@torch.no_grad()
def test_phi3_longrope_generation_across_the_switch_equals_hf_full_passes(tmp_path):
    """Prompts of 6 tokens generating 8: at the 9th token the length passes the original one and every cached
    key is stale (rotated with the short factors); posformer runs the whole sequence again. Its tokens equal
    greedy decoding by full passes of HF's model. (HF 4.57.6's own `generate` re-runs the sequence too, but
    keeps cache_position at [8] for the 9 tokens, so its tokens differ from its own full passes there.)"""
    hf = _phi3(**_longrope(8))
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = _left_padded(6)
    ours = model.generate(**batch, max_new_tokens=8, eos_token_id=[])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    for _ in range(8):
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        next_ids = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1].argmax(-1)
        ids, mask = torch.cat([ids, next_ids[:, None]], 1), torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    assert torch.equal(ours, ids)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"arch": "encoder_decoder"}, "arch='encoder_decoder'"),
        ({"parallel_residual": True}, "parallel_residual=True"),
        ({"scale_embeddings": True}, "scale_embeddings=True"),
        ({"attn_scale": 0.3}, "attention scale other than head_dim"),
        ({"head": "masked_lm"}, "'masked_lm'"),
        ({"layer_types": ["full_attention", "nope"], "layer_settings": {"nope": {"position": "none"}}}, "layer_types="),
    ],
)
def test_to_hf_refuses_what_phi3_cannot_express(tmp_path, changes, name):
    """Fields Phi3Config has no key for (one kind of layer: its sliding_window slides every one)."""
    cfg = pf.from_hf(save_hf(_phi3(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
