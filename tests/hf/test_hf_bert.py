"""BERT and RoBERTa against transformers 4.57.6: every position type and every head, both directions."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertLMHeadModel,
    BertModel,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaModel,
)

import posformer as pf
from hf_noise import perturb_constants
from hf_oracle import (
    assert_same_outputs,
    assert_to_hf_refuses,
    check_family,
    max_diff,
    padded_batch,
    removed_in_transformers_5,
    right_padded_batch,
    save_hf,
)

RELATIVE_KEY = removed_in_transformers_5("BERT's relative_key and relative_key_query position embeddings")

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=24,
    initializer_range=0.2,
    attn_implementation="eager",
)
QA = ("start_logits", "end_logits")


def _bert(hf_class=BertForMaskedLM, **changes):
    torch.manual_seed(0)
    return perturb_constants(hf_class(BertConfig(**{**SIZES, **changes}))).eval()


def _roberta(hf_class=RobertaForMaskedLM, **changes):
    torch.manual_seed(0)
    config = RobertaConfig(**{**SIZES, "max_position_embeddings": 26, "type_vocab_size": 1, **changes})
    return perturb_constants(hf_class(config)).eval()


def _with_token_types(batch: dict) -> dict:
    types = torch.zeros_like(batch["input_ids"])
    types[:, 5:] = 1
    return {**batch, "token_type_ids": types}


def test_against_hf_bert(tmp_path):
    model = check_family(_bert(), BertForMaskedLM, tmp_path, _with_token_types(padded_batch(97)))
    cfg = model.cfg
    assert (cfg.position, cfg.norm_placement, cfg.embed_norm, cfg.head_kind) == ("learned", "post", True, "masked_lm")
    assert model.head.proj.weight is model.embed_tokens.weight


def test_against_hf_bert_question_answering(tmp_path):
    hf = _bert(BertForQuestionAnswering)
    model = check_family(hf, BertForQuestionAnswering, tmp_path, _with_token_types(padded_batch(97)), field=QA)
    assert model.cfg.head_kind == "span_qa"


def test_against_hf_bert_base_model(tmp_path):
    hf = _bert(BertModel)
    model = check_family(hf, BertModel, tmp_path, _with_token_types(padded_batch(97)), field="last_hidden_state")
    assert model.head is None


def test_against_hf_bert_sequence_classification(tmp_path):
    hf = _bert(BertForSequenceClassification, num_labels=3)
    model = check_family(hf, BertForSequenceClassification, tmp_path, right_padded_batch(97), per_token=False)
    assert model.cfg.num_labels == 3 and model.head.pooler.weight.shape == (32, 32)


def test_against_hf_bert_untied_gelu_new(tmp_path):
    hf = _bert(tie_word_embeddings=False, hidden_act="gelu_new", layer_norm_eps=1e-5)
    model = check_family(hf, BertForMaskedLM, tmp_path, padded_batch(97))
    assert model.cfg.activation == "gelu_tanh" and model.head.proj.weight is not model.embed_tokens.weight


@RELATIVE_KEY
def test_against_hf_bert_relative_key(tmp_path):
    model = check_family(
        _bert(position_embedding_type="relative_key"), BertForMaskedLM, tmp_path, _with_token_types(padded_batch(97))
    )
    assert model.cfg.position == "relative_key"


@RELATIVE_KEY
def test_against_hf_bert_relative_key_query(tmp_path):
    model = check_family(
        _bert(position_embedding_type="relative_key_query", hidden_act="relu"),
        BertForMaskedLM,
        tmp_path,
        padded_batch(97),
    )
    assert model.cfg.position == "relative_key_query"


def test_bert_for_pretraining_loads_as_masked_lm(tmp_path):
    hf = _bert(BertForPreTraining)
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert model.cfg.head_kind == "masked_lm"
    assert_same_outputs(model, hf, padded_batch(97), "logits", hf_field="prediction_logits")


def test_legacy_gamma_beta_names_and_prefixed_base_model(tmp_path):
    """TensorFlow-era LayerNorm names, and a BertModel whose tensors carry the `bert.` prefix and an MLM head."""
    hf = _bert()
    directory = save_hf(hf, tmp_path)
    state = load_file(directory / "model.safetensors")
    legacy = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in state.items()
    }
    assert any(k.endswith("LayerNorm.gamma") for k in legacy)
    save_file(legacy, directory / "model.safetensors", metadata={"format": "pt"})
    assert_same_outputs(pf.from_hf(directory), hf, padded_batch(97))
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    base = pf.from_hf(directory)
    batch = padded_batch(97)
    with torch.no_grad():
        diff = max_diff(base(**batch).last_hidden_state, hf.bert(**batch).last_hidden_state, batch["attention_mask"])
    assert base.head is None and diff <= 1e-4


@pytest.mark.parametrize("kind", ["absolute", pytest.param("relative_key_query", marks=RELATIVE_KEY)])
def test_to_hf_writes_every_tensor_transformers_expects(tmp_path, kind):
    model = pf.from_hf(save_hf(_bert(position_embedding_type=kind), tmp_path / "hf"))
    pf.to_hf(model, tmp_path / "out")
    _, info = BertForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]


def test_against_hf_roberta(tmp_path):
    model = check_family(_roberta(), RobertaForMaskedLM, tmp_path, right_padded_batch(97))
    assert model.cfg.position_params == {"offset": 2} and model.cfg.type_vocab_size == 1


def test_against_hf_roberta_question_answering(tmp_path):
    check_family(
        _roberta(RobertaForQuestionAnswering), RobertaForQuestionAnswering, tmp_path, right_padded_batch(97), field=QA
    )


def test_against_hf_roberta_base_model(tmp_path):
    model = check_family(
        _roberta(RobertaModel), RobertaModel, tmp_path, right_padded_batch(97), field="last_hidden_state"
    )
    assert model.head is None


def test_against_hf_roberta_sequence_classification(tmp_path):
    hf = _roberta(RobertaForSequenceClassification, num_labels=4)
    check_family(hf, RobertaForSequenceClassification, tmp_path, right_padded_batch(97), per_token=False)


@RELATIVE_KEY
def test_against_hf_roberta_relative_key(tmp_path):
    model = check_family(
        _roberta(position_embedding_type="relative_key"), RobertaForMaskedLM, tmp_path, padded_batch(97)
    )
    assert model.cfg.position == "relative_key"


def test_roberta_left_padding_needs_position_ids(tmp_path):
    """HF numbers RoBERTa positions by counting non-pad tokens; posformer takes them as position_ids."""
    hf = _roberta()
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = padded_batch(97)
    batch["input_ids"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, hf.config.pad_token_id)
    position_ids = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ours = model(**batch, position_ids=position_ids).logits
        theirs = hf(**batch).logits
    keep = batch["attention_mask"].bool()
    assert float((ours - theirs).abs()[keep].max()) <= 1e-4


@pytest.mark.parametrize(
    "changes, hf_class, message",
    [
        ({"is_decoder": True}, BertForMaskedLM, "is_decoder"),
        ({"position_embedding_type": "rotary"}, BertForMaskedLM, "position_embedding_type='rotary'"),
        ({"hidden_act": "quick_gelu"}, BertForMaskedLM, "hidden_act='quick_gelu'"),
        ({"is_decoder": False}, BertLMHeadModel, "BertLMHeadModel"),
    ],
)
def test_unsupported_bert_features_are_named(tmp_path, changes, hf_class, message):
    config = BertConfig(**{**SIZES, "num_hidden_layers": 1}).to_dict()
    config.update(changes, architectures=[hf_class.__name__])
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=message):
        pf.hf.family.FAMILIES["bert"].config_from_hf(config)


def test_roberta_masked_lm_with_other_activation_is_refused():
    config = RobertaConfig(**{**SIZES, "hidden_act": "relu"}).to_dict()
    config["architectures"] = ["RobertaForMaskedLM"]
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="exact gelu"):
        pf.hf.family.FAMILIES["roberta"].config_from_hf(config)


def test_to_hf_refuses_a_layout_bert_cannot_hold(tmp_path):
    cfg = pf.Config.preset(
        "bert", vocab_size=50, d_model=16, n_layers=1, n_heads=2, norm_placement="pre", hf_model_type="bert"
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="post-LayerNorm"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)


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
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_to_hf_refuses_what_bert_and_roberta_cannot_express(tmp_path, family, changes, name):
    """Fields BertConfig and RobertaConfig have no key for: every layer one full attention without QK-norm, BERT's
    own MLM head, no transform before the QA head."""
    hf = _bert() if family == "bert" else _roberta()
    assert_to_hf_refuses(pf.from_hf(save_hf(hf, tmp_path / "hf")).cfg, changes, name, tmp_path / "out")
