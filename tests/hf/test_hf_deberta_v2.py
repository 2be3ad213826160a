"""DeBERTa-v2/v3 against transformers 4.57.6: shared and separate position projections, c2p/p2c,
log buckets and plain clamping, the relative-table LayerNorm, token types, activations and heads."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    DebertaV2Config,
    DebertaV2ForMaskedLM,
    DebertaV2ForQuestionAnswering,
    DebertaV2ForSequenceClassification,
    DebertaV2Model,
)

import posformer as pf
from hf_oracle import assert_same_outputs, assert_to_hf_refuses, check_family, padded_batch, save_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    initializer_range=0.2,
    relative_attention=True,
    position_biased_input=False,
    pos_att_type=["p2c", "c2p"],
    position_buckets=8,
    attn_implementation="eager",
)
# v3: shared key/query projections, 256 buckets, normalised relative table (microsoft/deberta-v3-base's settings).
V3 = dict(share_att_key=True, position_buckets=256, norm_rel_ebd="layer_norm")


def _hf(cls, **changes):
    """A tiny random HF model whose biases and LayerNorms are random too, so every mapping mistake shows."""
    torch.manual_seed(0)
    model = cls(DebertaV2Config(**{**SIZES, **changes}))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
            elif name.endswith("LayerNorm.weight"):
                param.normal_(1.0, 0.3)
    return model.eval()


def _batch(token_types: bool = False) -> dict:
    batch = padded_batch(97)
    if token_types:
        batch["token_type_ids"] = (torch.arange(11) >= 6).long().expand(3, 11)
    return batch


def _written(directory) -> tuple[dict, dict]:
    return json.loads((directory / "config.json").read_text()), load_file(directory / "model.safetensors")


def test_against_hf_deberta_v3_mlm(tmp_path):
    hf = _hf(DebertaV2ForMaskedLM, **{**V3, "position_buckets": 8})  # 8 buckets: distances > 4 are log-bucketed
    model = check_family(hf, DebertaV2ForMaskedLM, tmp_path, _batch())
    assert model.head.proj.weight is model.embed_tokens.weight
    config, state = _written(tmp_path / "roundtrip")
    assert config["share_att_key"] is True and config["legacy"] is True
    assert not any("pos_key_proj" in k or "pos_query_proj" in k for k in state)


def test_v3_position_projections_diverged_export_separately(tmp_path):
    model = pf.from_hf(save_hf(_hf(DebertaV2ForMaskedLM, **V3), tmp_path / "hf"))
    with torch.no_grad():  # as after fine-tuning in posformer, where the copies are separate parameters
        model.encoder.position.pos_key_proj[1].weight.add_(0.1)
    pf.to_hf(model, tmp_path / "out")
    config, state = _written(tmp_path / "out")
    assert config["share_att_key"] is False and "deberta.encoder.layer.1.attention.self.pos_key_proj.weight" in state
    reloaded = DebertaV2ForMaskedLM.from_pretrained(tmp_path / "out", attn_implementation="eager")
    assert_same_outputs(model, reloaded, _batch())


def test_against_hf_deberta_v2_base_model(tmp_path):
    hf = _hf(
        DebertaV2Model,
        share_att_key=False,
        position_buckets=-1,
        max_relative_positions=6,
        type_vocab_size=2,
        hidden_act="gelu_new",
    )  # distances beyond 6 are clamped
    model = check_family(hf, DebertaV2Model, tmp_path, _batch(token_types=True), field="last_hidden_state")
    assert model.head is None and model.cfg.type_vocab_size == 2 and model.cfg.activation == "gelu_tanh"
    config, state = _written(tmp_path / "roundtrip")
    assert config["share_att_key"] is False and "encoder.layer.0.attention.self.pos_query_proj.bias" in state


@pytest.mark.parametrize("buckets", [256, 0])
def test_against_hf_deberta_v2_buckets(tmp_path, buckets):
    hf = _hf(DebertaV2Model, position_buckets=buckets, norm_rel_ebd="layer_norm", hidden_act="relu")
    check_family(hf, DebertaV2Model, tmp_path, _batch(), field="last_hidden_state")


@pytest.mark.parametrize("kinds,share", [(["c2p"], True), (["c2p"], False), (["p2c"], True), (["p2c"], False)])
def test_against_hf_deberta_v2_qa_one_position_term(tmp_path, kinds, share):
    hf = _hf(DebertaV2ForQuestionAnswering, pos_att_type=kinds, share_att_key=share, hidden_act="silu")
    model = check_family(hf, DebertaV2ForQuestionAnswering, tmp_path, _batch(), field="start_logits")
    reloaded = DebertaV2ForQuestionAnswering.from_pretrained(tmp_path / "roundtrip", attn_implementation="eager")
    assert_same_outputs(model, reloaded, _batch(), field="end_logits")
    assert _written(tmp_path / "roundtrip")[0]["share_att_key"] is share


def test_against_hf_deberta_v2_mlm_untied(tmp_path):
    hf = _hf(DebertaV2ForMaskedLM, tie_word_embeddings=False, type_vocab_size=2)
    model = check_family(hf, DebertaV2ForMaskedLM, tmp_path, _batch(token_types=True))
    assert model.head.proj.weight is not model.embed_tokens.weight
    assert "cls.predictions.decoder.weight" in _written(tmp_path / "roundtrip")[1]


def test_against_hf_deberta_v2_mlm_non_legacy_head(tmp_path):
    """legacy=False keeps the head under lm_predictions.*; it is written back in the legacy layout."""
    hf = _hf(DebertaV2ForMaskedLM, **V3, legacy=False, tie_word_embeddings=False)
    model = check_family(hf, DebertaV2ForMaskedLM, tmp_path, _batch())
    assert model.head.proj.weight is model.embed_tokens.weight


def test_base_model_from_original_checkpoint_layout(tmp_path):
    """Microsoft's checkpoints: no architectures, `deberta.` prefix, lm_predictions/mask_predictions heads."""
    hf = _hf(DebertaV2ForMaskedLM, **V3, legacy=False, tie_word_embeddings=False)
    directory = save_hf(hf, tmp_path / "hf")
    config, state = _written(directory)
    for key in ("architectures", "legacy", "tie_word_embeddings"):
        config.pop(key, None)
    (directory / "config.json").write_text(json.dumps({**config, "pos_att_type": "p2c|c2p"}))
    save_file(
        {**state, "mask_predictions.dense.weight": torch.zeros(32, 32)},
        directory / "model.safetensors",
        metadata={"format": "pt"},
    )
    model = pf.from_hf(directory)
    assert model.head is None
    base = DebertaV2Model.from_pretrained(directory, attn_implementation="eager")
    assert_same_outputs(model, base, _batch(), field="last_hidden_state")


def test_export_native_posformer_model(tmp_path):
    cfg = pf.Config(
        arch="encoder",
        vocab_size=97,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=40,
        position="deberta",
        position_params={"position_buckets": 8, "norm_rel_ebd": "layer_norm"},
        max_positions=64,
        norm_placement="post",
        embed_norm=True,
        head="span_qa",
        init_std=0.2,
        hf_model_type="deberta-v2",
    )
    model = pf.Transformer(cfg).eval()
    hf = DebertaV2ForQuestionAnswering.from_pretrained(pf.to_hf(model, tmp_path), attn_implementation="eager")
    assert_same_outputs(model, hf, _batch(), field="start_logits")


@pytest.mark.parametrize(
    "changes, position, factor",
    [
        ({"position_biased_input": True, "pos_att_type": None}, "learned", 1),
        ({"position_biased_input": True, "norm_rel_ebd": "layer_norm"}, "learned", 3),
        ({"pos_att_type": "c2p"}, "none", 2),
    ],
    ids=["defaults", "learned-scaled", "no-positions"],
)
def test_against_hf_deberta_v2_without_relative_attention(tmp_path, changes, position, factor):
    """DebertaV2Config's defaults: an absolute table (or none), attention still scaled by pos_att_type's length."""
    hf = _hf(DebertaV2ForMaskedLM, relative_attention=False, **changes)
    model = check_family(hf, DebertaV2ForMaskedLM, tmp_path, _batch())
    assert model.cfg.position == position and model.cfg.scale == pytest.approx((8 * factor) ** -0.5)
    config, _ = _written(tmp_path / "roundtrip")
    assert config["relative_attention"] is False and config["position_biased_input"] == (position == "learned")


def test_export_refuses_what_deberta_cannot_express(tmp_path):
    cfg = pf.Config(
        arch="encoder",
        vocab_size=97,
        d_model=32,
        n_layers=1,
        n_heads=4,
        position="deberta",
        norm_placement="pre",
        embed_norm=True,
        head="none",
        hf_model_type="deberta-v2",
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="norm_placement='pre'"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)
    for changes, message in (
        ({"position": "rope"}, "position='rope'"),
        ({"position": "learned", "attn_scale": 0.5}, "attn_scale=0.5"),
    ):
        cfg = cfg.replace(norm_placement="post", **changes)
        with pytest.raises(pf.hf.UnsupportedCheckpoint, match=message):
            pf.to_hf(pf.Transformer(cfg), tmp_path)


@pytest.mark.parametrize(
    "changes,feature",
    [
        ({"position_biased_input": True}, "position_biased_input=True with relative_attention=True"),
        ({"conv_kernel_size": 3}, "conv_kernel_size=3"),
        ({"embedding_size": 16}, "embedding_size=16"),
        ({"pos_att_type": ["c2p", "p2p"]}, "pos_att_type"),
        ({"pos_att_type": None}, "empty pos_att_type"),
        ({"norm_rel_ebd": "layer_norm|other"}, "norm_rel_ebd"),
        ({"hidden_act": "tanh"}, "activation 'tanh'"),
        ({"architectures": ["DebertaV2ForMaskedLM"], "legacy": False}, "legacy=False"),
        ({"architectures": ["DebertaV2ForSequenceClassification"]}, "supported heads"),
    ],
)
def test_unsupported_features_are_named(tmp_path, changes, feature):
    DebertaV2Config(**{**SIZES, **changes}).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=feature):
        pf.from_hf(tmp_path)


def test_sequence_classification_is_refused_before_weights(tmp_path):
    _hf(DebertaV2ForSequenceClassification).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=r"\*ForMaskedLM"):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"qk_norm": True}, "qk_norm=True"),
        ({"sliding_window": 4}, "sliding_window=4"),
        ({"layer_types": ["full_attention", "nope"], "layer_settings": {"nope": {"position": "none"}}}, "layer_types="),
        ({"query_temperature": {"scale": 0.1, "floor_size": 4}}, "query_temperature="),
        ({"head": "span_qa", "head_transform": True}, "head_transform=True"),
        ({"mlm_head": "lm", "head_transform": True}, "mlm_head='lm'"),
    ],
)
def test_to_hf_refuses_what_deberta_v2_cannot_express(tmp_path, changes, name):
    """Fields DebertaV2Config has no key for: every layer one full attention without QK-norm, its own MLM head, no
    transform before the QA head."""
    cfg = pf.from_hf(save_hf(_hf(DebertaV2ForMaskedLM), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
