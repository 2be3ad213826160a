"""Warm-starting BERT2BERT from one BERT checkpoint against transformers' `from_encoder_decoder_pretrained`.

The oracle is `EncoderDecoderModel.from_encoder_decoder_pretrained(dir, dir)` (transformers 4.57.6):
the tensors it copies from the checkpoint must equal ours exactly, the ones it initialises must be
initialised the same way (deterministic ones equal, random ones of the same spread), and the
exported model must be what transformers loads, with our logits.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertForMaskedLM, BertModel, EncoderDecoderModel, RobertaConfig, RobertaModel

import posformer as pf
from hf_noise import perturb_constants
from hf_oracle import TRANSFORMERS_5, assert_same_outputs, padded_batch

VOCAB = 97
SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=40,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    initializer_range=0.2,
)
FRESH = ("crossattention", "cls.")  # what transformers initialises when the checkpoint is a BertModel
IDS = dict(decoder_start_token_id=2, eos_token_id=3, pad_token_id=1)


def _save_bert(directory, cls=BertModel, **changes):
    """A random BERT with random LayerNorms and biases (HF: 1 and 0), so a tensor copied wrong shows."""
    torch.manual_seed(0)
    perturb_constants(cls(BertConfig(**{**SIZES, **changes}))).save_pretrained(directory)
    return directory


def _exported(model: pf.Transformer, directory) -> dict[str, torch.Tensor]:
    pf.to_hf(model, directory)
    return load_file(directory / "model.safetensors")


def _oracle(directory) -> dict[str, torch.Tensor]:
    """transformers' BERT2BERT tensors, without the encoder's pooler and the LM head's tied copies."""
    hf = EncoderDecoderModel.from_encoder_decoder_pretrained(str(directory), str(directory))
    state = hf.state_dict()
    copies = {  # transformers 5 ties these only with tied embeddings; 4 ties the bias always
        "decoder.cls.predictions.decoder.weight": "decoder.bert.embeddings.word_embeddings.weight",
        "decoder.cls.predictions.decoder.bias": "decoder.cls.predictions.bias",
    }
    tied = {copy for copy, source in copies.items() if state[copy].data_ptr() == state[source].data_ptr()}
    return {k: v for k, v in state.items() if not k.startswith("encoder.pooler.") and k not in tied}


def _loaded_by_transformers_alike(model: pf.Transformer, directory) -> EncoderDecoderModel:
    """`model` exported to `directory` and loaded by transformers, checked to give our outputs on padded batches."""
    pf.to_hf(model, directory)
    hf = EncoderDecoderModel.from_pretrained(directory, attn_implementation="eager").eval()
    decoder = padded_batch(VOCAB, length=5, seed=1)
    assert_same_outputs(
        model,
        hf,
        padded_batch(VOCAB),
        use_cache=False,
        decoder_input_ids=decoder["input_ids"],
        decoder_attention_mask=decoder["attention_mask"],
    )
    return hf


def test_warm_start_copies_what_transformers_copies_and_initialises_the_rest_alike(tmp_path):
    bert = _save_bert(tmp_path / "bert")
    torch.manual_seed(3)
    model = pf.hf.bert2bert_from_pretrained(bert, **IDS)
    ours, theirs = _exported(model, tmp_path / "ours"), _oracle(bert)
    assert set(ours) == set(theirs)
    fresh = [k for k in theirs if any(part in k for part in FRESH)]
    assert fresh and any("crossattention" in k for k in fresh)
    for key in set(theirs) - set(fresh):
        assert torch.equal(ours[key], theirs[key]), key
    checkpoint = load_file(bert / "model.safetensors")
    assert torch.equal(
        ours["decoder.bert.encoder.layer.1.output.dense.weight"], checkpoint["encoder.layer.1.output.dense.weight"]
    )
    for key in fresh:
        if key.endswith(".weight") and "LayerNorm" not in key:  # N(0, initializer_range)
            assert ours[key].std().item() == pytest.approx(0.2, rel=0.15), key
            assert theirs[key].std().item() == pytest.approx(0.2, rel=0.15), key
        else:  # biases 0, LayerNorm 1 and 0
            assert torch.equal(ours[key], theirs[key]), key
    assert model.head.proj.weight is model.decoder_embed_tokens.weight
    assert model.decoder_embed_tokens.weight is not model.embed_tokens.weight
    assert (model.cfg.decoder_start_token_id, model.cfg.eos_token_id, model.cfg.pad_token_id) == (2, 3, 1)


def test_warm_start_is_reproducible_from_the_seed(tmp_path):
    bert = _save_bert(tmp_path / "bert")
    states = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        states.append(pf.hf.bert2bert_from_pretrained(bert).state_dict())
    key = "decoder.layers.0.cross_attn.q.weight"
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert not torch.equal(states[0][key], states[2][key])
    assert torch.equal(states[0]["decoder.layers.0.attn.qkv.weight"], states[2]["decoder.layers.0.attn.qkv.weight"])


@pytest.mark.parametrize("tied", [True, False])
def test_a_masked_lm_checkpoint_starts_the_decoder_head(tmp_path, tied):
    bert = _save_bert(tmp_path / "bert", BertForMaskedLM, tie_word_embeddings=tied)
    model = pf.hf.bert2bert_from_pretrained(bert, **IDS)
    ours, theirs = _exported(model, tmp_path / "ours"), _oracle(bert)
    head = [k for k in theirs if k.startswith("decoder.cls.")]
    assert ("decoder.cls.predictions.decoder.weight" in head) == (not tied)
    if TRANSFORMERS_5 and not tied:  # untied, transformers 5's head adds the decoder's own bias and leaves this unused
        head.remove("decoder.cls.predictions.bias")
        assert "decoder.cls.predictions.decoder.bias" in head
    for key in head:
        assert torch.equal(ours[key], theirs[key]), key


def test_the_exported_model_is_what_transformers_loads_with_our_logits(tmp_path):
    position = "absolute" if TRANSFORMERS_5 else "relative_key"  # transformers 5 removed relative_key
    bert = _save_bert(tmp_path / "bert", position_embedding_type=position)
    torch.manual_seed(3)
    model = pf.hf.bert2bert_from_pretrained(bert, **IDS)
    hf = _loaded_by_transformers_alike(model, tmp_path / "hf")
    assert (hf.config.decoder_start_token_id, hf.config.eos_token_id, hf.config.pad_token_id) == (2, 3, 1)


def test_cross_attention_started_from_self_attention_is_hfs_own_layers_copied(tmp_path):
    """cross_attention_init="self_attention": the exported cross-attention tensors equal transformers' BERT2BERT with
    each decoder layer's `crossattention` set from its own `attention` (query, key, value, output dense and
    LayerNorm), in transformers' names; everything else as the random start."""
    bert = _save_bert(tmp_path / "bert")
    torch.manual_seed(5)
    ours = _exported(
        pf.hf.bert2bert_from_pretrained(bert, **IDS, cross_attention_init="self_attention"), tmp_path / "x"
    )
    theirs = _oracle(bert)
    for i in range(SIZES["num_hidden_layers"]):
        layer = f"decoder.bert.encoder.layer.{i}."
        for own, cross in (
            ("attention.self.", "crossattention.self."),
            ("attention.output.", "crossattention.output."),
        ):
            for name in [k for k in theirs if k.startswith(layer + own)]:
                theirs[name.replace(layer + own, layer + cross)] = theirs[name]
    cross = [k for k in theirs if "crossattention" in k]
    assert len(cross) == 2 * 10
    for name in cross:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=0, msg=name)
    with pytest.raises(ValueError, match=r"cross_attention_init='copy' is invalid: expected one of"):
        pf.hf.bert2bert_from_pretrained(bert, cross_attention_init="copy")


def test_a_shorter_decoder_keeps_berts_first_layers_and_exports_to_what_transformers_loads(tmp_path):
    bert = _save_bert(tmp_path / "bert")
    torch.manual_seed(3)
    model = pf.hf.bert2bert_from_pretrained(bert, **IDS, decoder_layers=1, cross_attention_init="self_attention")
    assert model.cfg.decoder_layers == 1 and len(model.decoder.layers) == 1
    source = pf.from_hf(bert).state_dict()
    torch.testing.assert_close(
        model.state_dict()["decoder.layers.0.ffn.up.weight"], source["encoder.layers.0.ffn.up.weight"]
    )
    assert _loaded_by_transformers_alike(model, tmp_path / "hf").config.decoder.num_hidden_layers == 1
    with pytest.raises(ValueError, match=r"decoder_layers=3 is invalid: expected an integer in \[1, 2\]"):
        pf.hf.bert2bert_from_pretrained(bert, decoder_layers=3)


def test_only_a_bert_checkpoint_warm_starts(tmp_path):
    torch.manual_seed(0)
    RobertaModel(RobertaConfig(**SIZES)).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="model_type 'bert'.*'roberta'"):
        pf.hf.bert2bert_from_pretrained(tmp_path)
