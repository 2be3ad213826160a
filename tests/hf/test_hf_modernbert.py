"""ModernBERT against the installed transformers (4.57.6 and 5.x both have it, with its masked-LM and
question-answering heads): global and local layers (a bidirectional window of `local_attention // 2` on either
side, each kind with its own RoPE base), LayerNorm without biases, the first layer's attention reading the embedding
norm, GeGLU; inputs shorter and longer than the window, with padding; round trips through `to_hf`; a span head
started from a masked-LM checkpoint is ModernBertForQuestionAnswering's; what transformers 4 cannot read is refused
for it, and transformers 5 reads the per-layer-type `rope_parameters` that `to_hf` writes."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import ModernBertConfig, ModernBertForMaskedLM, ModernBertForQuestionAnswering, ModernBertModel

import posformer as pf
from hf_oracle import TOLERANCE, TRANSFORMERS_5, assert_same_outputs, check_family, max_diff, padded_batch, save_hf
from posformer.hf.layer_kinds import LOCAL

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    max_position_embeddings=64,
    initializer_range=0.2,
    local_attention=8,  # 4 tokens on either side: a 24-token input reaches past it
    global_attn_every_n_layers=3,  # layers 0 and 3 global, 1 and 2 local
    global_rope_theta=1000.0,
    local_rope_theta=20.0,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
)
SPAN = ("start_logits", "end_logits")


@torch.no_grad()
def _modernbert(model_class=ModernBertForMaskedLM, **changes):
    """A tiny random ModernBERT whose norm weights and biases are random too (HF starts them at 1 and 0, where a
    swapped or missing one would not show)."""
    torch.manual_seed(0)
    hf = model_class(ModernBertConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():
        if "norm" in name or name.endswith("bias"):
            param.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.3)
    return hf


@pytest.mark.parametrize("length", [11, 24], ids=["short", "past-the-window"])
def test_against_hf_modernbert_masked_lm(tmp_path, length):
    model = check_family(_modernbert(), ModernBertForMaskedLM, tmp_path, padded_batch(97, length=length))
    found = [(block.reach.window, block.attn.position.params["theta"]) for block in model.encoder.layers]
    assert found == [(None, 1000.0), (5, 20.0), (5, 20.0), (None, 1000.0)]
    assert model.encoder.layers[0].attn_res.norm.__class__ is torch.nn.Identity


def test_the_window_and_the_local_base_both_show_in_the_logits(tmp_path):
    """The parity above is no accident: the same weights without the local layers' window, or with the global
    base on them, give other logits than transformers' past the window."""
    hf = _modernbert()
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = padded_batch(97, length=24)
    local = model.cfg.layer_settings[LOCAL]
    for settings in ({"position_params": local["position_params"]}, {"sliding_window": local["sliding_window"]}):
        other = pf.Transformer(model.cfg.replace(layer_settings={LOCAL: settings})).eval()
        other.load_state_dict(model.state_dict())
        with torch.no_grad():
            assert max_diff(other(**batch).logits, hf(**batch).logits, batch["attention_mask"]) > 100 * TOLERANCE


def test_against_hf_modernbert_question_answering_with_every_bias(tmp_path):
    biases = dict(attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True)
    model = check_family(
        _modernbert(ModernBertForQuestionAnswering, **biases),
        ModernBertForQuestionAnswering,
        tmp_path,
        padded_batch(97, length=24),
        field=SPAN,
    )
    assert model.cfg.head_kind == "span_qa" and model.cfg.head_transform_bias and model.cfg.norm_bias


def test_against_hf_modernbert_base_model_with_rope_scaling_and_tanh_gelu(tmp_path):
    """A `rope_scaling` scales both kinds of layer (both transformers apply it so); an untied model's decoder."""
    changes = dict(rope_scaling={"rope_type": "linear", "factor": 2.0}, hidden_activation="gelu_pytorch_tanh")
    model = check_family(
        _modernbert(ModernBertModel, **changes), ModernBertModel, tmp_path, padded_batch(97, 24), "last_hidden_state"
    )
    assert {block.attn.position.params["scaling"]["factor"] for block in model.encoder.layers} == {2.0}


def test_against_hf_modernbert_untied_without_decoder_bias(tmp_path):
    hf = _modernbert(tie_word_embeddings=False, decoder_bias=False)
    model = check_family(hf, ModernBertForMaskedLM, tmp_path, padded_batch(97, length=24))
    assert model.head.proj.bias is None and model.head.proj.weight is not model.embed_tokens.weight


def test_a_span_head_started_from_a_masked_lm_checkpoint_is_modernberts(tmp_path):
    """`from_hf(..., head="span_qa")` (what `qa train --head span` does) gives ModernBertForQuestionAnswering's
    head: written by `to_hf`, transformers loads it with every tensor and gives the same start and end logits."""
    model = pf.from_hf(save_hf(_modernbert(), tmp_path / "mlm"), head="span_qa")
    pf.to_hf(model, tmp_path / "qa")
    written = json.loads((tmp_path / "qa" / "config.json").read_text())
    assert written["architectures"] == ["ModernBertForQuestionAnswering"]
    hf, info = ModernBertForQuestionAnswering.from_pretrained(
        tmp_path / "qa", attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert_same_outputs(model, hf.eval(), padded_batch(97, length=24), SPAN)


@pytest.mark.skipif(not TRANSFORMERS_5, reason="transformers 4.57.6 does not read rope_parameters (5.x does)")
def test_transformers_5_reads_the_rope_parameters_by_layer_type_that_to_hf_writes(tmp_path):
    model = pf.from_hf(save_hf(_modernbert(), tmp_path / "hf"))
    pf.to_hf(model, tmp_path / "v5", rope_parameters=True)
    written = json.loads((tmp_path / "v5" / "config.json").read_text())
    assert {"global_rope_theta", "local_rope_theta", "rope_theta"}.isdisjoint(written)
    assert written["rope_parameters"] == {
        "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 20.0},
    }
    hf = ModernBertForMaskedLM.from_pretrained(tmp_path / "v5", attn_implementation="eager")
    assert_same_outputs(model, hf.eval(), padded_batch(97, length=24))


@pytest.mark.skipif(not TRANSFORMERS_5, reason="transformers 4.57.6 scales both kinds of layer alike (5.x need not)")
def test_against_hf_modernbert_with_a_scaling_on_the_global_layers_only(tmp_path):
    """transformers 5's `rope_parameters` may scale one kind of layer only: read, and written back in that form
    (v4's keys cannot say it, so a transformers 4 export is refused)."""
    rope = {
        "full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 4.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 20.0},
    }
    model = check_family(
        _modernbert(rope_parameters=rope), ModernBertForMaskedLM, tmp_path, padded_batch(97, length=24)
    )
    assert json.loads((tmp_path / "roundtrip" / "config.json").read_text())["rope_parameters"] == rope
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="transformers 4.57.6 cannot read"):
        pf.to_hf(model, tmp_path / "v4", transformers_version="4.57.6")


def test_a_layer_pattern_only_transformers_5_writes_is_refused_for_transformers_4(tmp_path):
    """transformers 5's `layer_types` may start with a local layer; 4.57.6 knows every n-th layer from the first
    only, and reads neither `layer_types` nor `rope_parameters`."""
    model = pf.from_hf(save_hf(_modernbert(), tmp_path / "hf"))
    types = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    model.cfg = model.cfg.replace(layer_types=types)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="transformers 4.57.6 cannot read"):
        pf.to_hf(model, tmp_path / "v4", transformers_version="4.57.6")
    pf.to_hf(model, tmp_path / "v5", transformers_version="5.24.0")
    written = json.loads((tmp_path / "v5" / "config.json").read_text())
    assert written["layer_types"] == types and "global_attn_every_n_layers" not in written
    assert pf.from_hf(tmp_path / "v5").cfg.layer_types == types


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"architectures": ["ModernBertForSequenceClassification"]}, "ModernBertForSequenceClassification"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
        ({"classifier_activation": "relu"}, "classifier_activation='relu'"),
        ({"hidden_activation": "tanh"}, "hidden_activation='tanh'"),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 5.0}}, "not nested by layer type"),
        ({"rope_scaling": {"rope_type": "unknown"}}, "'unknown'"),
    ],
    ids=["sequence-classification", "partial-rotation", "classifier-activation", "activation", "flat", "rope-type"],
)
def test_what_posformer_does_not_implement_is_refused_by_name(tmp_path, changes, message):
    save_hf(_modernbert(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    if "rope_scaling" in changes or "partial_rotary_factor" in changes:  # v4's keys: the v5 entries out of the way
        config.pop("rope_parameters", None)
    (tmp_path / "config.json").write_text(json.dumps({**config, **changes}))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=message):
        pf.from_hf(tmp_path)
