"""EuroBERT against transformers 5.x (4.57.6 has no EuroBERT: there the module is skipped, and the hf5 suite runs
it): LLaMA's layers as a bidirectional encoder (pre-RMSNorm, RoPE, SwiGLU, grouped-query attention), a masked-LM
head that is a projection alone, with padding; round trips through `to_hf`, in v4's RoPE keys and in v5's
`rope_parameters`."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

import posformer as pf
from hf_oracle import assert_same_outputs, assert_to_hf_refuses, check_family, padded_batch, save_hf

if not hasattr(transformers, "EuroBertConfig"):
    pytest.skip("this transformers has no EuroBERT (5.x has)", allow_module_level=True)

from transformers import EuroBertConfig, EuroBertForMaskedLM, EuroBertModel  # noqa: E402

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.2,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    mask_token_id=3,
)


@torch.no_grad()
def _eurobert(model_class=EuroBertForMaskedLM, **changes):
    """A tiny random EuroBERT whose norm weights and biases are random too (HF starts them at 1 and 0)."""
    torch.manual_seed(0)
    hf = model_class(EuroBertConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():
        if "norm" in name or name.endswith("bias"):
            param.normal_(1.0 if "norm" in name else 0.0, 0.3)
    return hf


def test_against_hf_eurobert_masked_lm(tmp_path):
    model = check_family(_eurobert(), EuroBertForMaskedLM, tmp_path, padded_batch(97, length=24))
    assert (model.cfg.arch, model.cfg.head_kind, model.cfg.tie_embeddings) == ("encoder", "masked_lm", False)
    assert not model.head.transform and model.head.proj.bias is None


def test_against_hf_eurobert_with_biases_tied_and_scaled_rope(tmp_path):
    changes = dict(
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0},
    )
    model = check_family(_eurobert(**changes), EuroBertForMaskedLM, tmp_path, padded_batch(97, length=24))
    assert model.cfg.position_params["scaling"] == {"type": "linear", "factor": 2.0}
    assert model.head.proj.bias is not None and model.head.proj.weight is model.embed_tokens.weight


def test_against_hf_eurobert_base_model(tmp_path):
    check_family(_eurobert(EuroBertModel), EuroBertModel, tmp_path, padded_batch(97), field="last_hidden_state")


def test_to_hf_writes_rope_parameters_that_transformers_5_reads(tmp_path):
    model = pf.from_hf(save_hf(_eurobert(rope_parameters={"rope_type": "default", "rope_theta": 500.0}), tmp_path))
    pf.to_hf(model, tmp_path / "v5", rope_parameters=True)
    written = json.loads((tmp_path / "v5" / "config.json").read_text())
    assert written["rope_parameters"] == {"rope_type": "default", "rope_theta": 500.0} and "rope_theta" not in written
    hf = EuroBertForMaskedLM.from_pretrained(tmp_path / "v5", attn_implementation="eager")
    assert_same_outputs(model, hf.eval(), padded_batch(97, length=24))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"architectures": ["EuroBertForSequenceClassification"]}, "EuroBertForSequenceClassification"),
        ({"hidden_act": "tanh"}, "hidden_act='tanh'"),
        ({"pretraining_tp": 2}, "pretraining_tp=2"),
        ({"rope_parameters": {"rope_type": "unknown", "rope_theta": 5.0}}, "rope_type 'unknown'"),
    ],
    ids=["sequence-classification", "activation", "tensor-parallel", "rope-type"],
)
def test_what_posformer_does_not_implement_is_refused_by_name(tmp_path, changes, message):
    save_hf(_eurobert(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **changes}))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=message):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"parallel_residual": True}, "parallel_residual=True"),
        ({"sliding_window": 4}, "sliding_window=4"),
        ({"attn_scale": 0.3}, "attention scale other than head_dim"),
        ({"type_vocab_size": 2}, "type_vocab_size=2"),
    ],
)
def test_to_hf_refuses_what_eurobert_cannot_express(tmp_path, changes, name):
    """Fields EuroBertConfig has no key for: transformers would build the model without them."""
    cfg = pf.from_hf(save_hf(_eurobert(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
