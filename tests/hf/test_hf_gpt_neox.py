"""GPT-NeoX against transformers 4.57.6: per-head fused q/k/v, partial RoPE, parallel and sequential residual."""

from __future__ import annotations

import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, GPTNeoXModel

import posformer as pf
from hf_noise import perturb_constants
from hf_oracle import PLAIN_DECODER_REFUSALS, assert_to_hf_refuses, check_family, padded_batch, save_hf
from posformer.hf.qkv_layout import ours_to_per_head, per_head_to_ours

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=64,
    initializer_range=0.2,
    rotary_pct=0.5,
    rotary_emb_base=500,
    attn_implementation="eager",
)


def _neox(cls=GPTNeoXForCausalLM, **changes):
    torch.manual_seed(0)
    return perturb_constants(cls(GPTNeoXConfig(**{**SIZES, **changes})))


def test_per_head_layout_round_trips():
    rows = torch.arange(2 * 3 * 4)  # 2 heads of dim 4: q0 k0 v0 q1 k1 v1
    ours = per_head_to_ours(rows, n_heads=2, head_dim=4)
    assert ours[:8].tolist() == [0, 1, 2, 3, 12, 13, 14, 15]  # q of head 0, then q of head 1
    assert torch.equal(ours_to_per_head(ours, 2, 4), rows)


def test_against_hf_gpt_neox(tmp_path):
    model = check_family(_neox(), GPTNeoXForCausalLM, tmp_path, padded_batch(97))
    cfg = model.cfg
    assert cfg.parallel_residual and cfg.position_params["rotary_fraction"] == 0.5
    assert cfg.position_params["theta"] == 500.0 and not cfg.tie_embeddings


def test_against_hf_gpt_neox_sequential_residual(tmp_path):
    model = check_family(_neox(use_parallel_residual=False), GPTNeoXForCausalLM, tmp_path, padded_batch(97))
    assert not model.cfg.parallel_residual


def test_against_hf_gpt_neox_no_bias_full_rotary_tied_relu(tmp_path):
    hf = _neox(attention_bias=False, rotary_pct=1.0, tie_word_embeddings=True, hidden_act="relu")
    model = check_family(hf, GPTNeoXForCausalLM, tmp_path, padded_batch(97))
    assert not model.cfg.qkv_bias and model.head.proj.weight is model.embed_tokens.weight


@pytest.mark.parametrize(
    "scaling", [{"rope_type": "linear", "factor": 2.0}, {"type": "dynamic", "factor": 2.0}], ids=["linear", "dynamic"]
)
def test_against_hf_gpt_neox_rope_scaling(tmp_path, scaling):
    changes = {"rope_scaling": scaling}
    if "dynamic" in scaling.values():
        changes["max_position_embeddings"] = 8  # the batch (11 tokens) is longer: the dynamic base grows
    check_family(_neox(**changes), GPTNeoXForCausalLM, tmp_path, padded_batch(97))


def test_against_hf_gpt_neox_base_model(tmp_path):
    model = check_family(_neox(GPTNeoXModel), GPTNeoXModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


def test_gpt_neox_unknown_activation_is_refused(tmp_path):
    GPTNeoXConfig(**{**SIZES, "hidden_act": "quick_gelu"}).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="quick_gelu"):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize("changes, name", PLAIN_DECODER_REFUSALS)
def test_to_hf_refuses_what_gpt_neox_cannot_express(tmp_path, changes, name):
    """Fields GPTNeoXConfig has no key for: every layer one full attention without QK-norm, a plain LM head."""
    cfg = pf.from_hf(save_hf(_neox(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
