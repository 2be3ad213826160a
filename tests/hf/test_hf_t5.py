"""T5 (v1.0, v1.1), mT5, T5Model and T5EncoderModel against transformers 4.57.6; the t5 preset exports."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    MT5Config,
    MT5ForConditionalGeneration,
    T5Config,
    T5EncoderModel,
    T5ForConditionalGeneration,
    T5Model,
)

import posformer as pf
from hf_oracle import (
    PLAIN_STACK_REFUSALS,
    TRANSFORMERS_5,
    assert_same_outputs,
    assert_to_hf_refuses,
    check_family,
    padded_batch,
    round_trip,
    save_hf,
)

SIZES = dict(
    vocab_size=97,
    d_model=32,
    d_kv=12,
    d_ff=40,
    num_layers=2,
    num_decoder_layers=3,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    dropout_rate=0.0,
    initializer_factor=1.0,
    decoder_start_token_id=0,
)


def _randomize(model: torch.nn.Module) -> torch.nn.Module:
    """Norm weights HF initialises to 1, and larger relative-bias tables, so mapping mistakes show."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layer_norm" in name or name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            elif "relative_attention_bias" in name or "position.table" in name:
                param.normal_(0.0, 1.0)
    return model


def _t5(cls=T5ForConditionalGeneration, config_cls=T5Config, **changes):
    torch.manual_seed(0)
    return _randomize(cls(config_cls(**{**SIZES, **changes}, attn_implementation="eager")))


def _decoder_inputs(vocab_size: int = 97) -> dict[str, torch.Tensor]:
    """Decoder ids (3, 7) with a full, a right-padded and a left-padded row."""
    batch = padded_batch(vocab_size, length=7, seed=1)
    return {"decoder_input_ids": batch["input_ids"], "decoder_attention_mask": batch["attention_mask"]}


def test_against_hf_t5_v1_0_relu_tied_scaled_head(tmp_path):
    model = check_family(_t5(), T5ForConditionalGeneration, tmp_path, padded_batch(97), **_decoder_inputs())
    cfg = model.cfg
    assert cfg.activation == "relu" and cfg.tie_embeddings and cfg.scale_tied_head and cfg.scale == 1.0
    assert model.head.proj.weight is model.embed_tokens.weight
    assert (cfg.n_layers, cfg.decoder_layers, cfg.head_dim) == (2, 3, 12)
    assert (cfg.pad_token_id, cfg.eos_token_id, cfg.decoder_start_token_id) == (0, 1, 0)
    assert cfg.position_params == {"num_buckets": 8, "max_distance": 20}


def test_against_hf_t5_v1_1_gated_gelu_untied(tmp_path):
    hf = _t5(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    model = check_family(hf, T5ForConditionalGeneration, tmp_path, padded_batch(97), **_decoder_inputs())
    assert model.cfg.activation == "geglu_tanh"
    if TRANSFORMERS_5:  # transformers 5 builds every T5 with a tied head, unscaled when tie_word_embeddings=False
        assert model.cfg.tie_embeddings and not model.cfg.scale_tied_head
    else:
        assert not model.cfg.tie_embeddings


@pytest.mark.parametrize("proj, ours", [("gated-silu", "swiglu"), ("gelu", "gelu")])
def test_against_hf_t5_other_feed_forwards(tmp_path, proj, ours):
    hf = _t5(feed_forward_proj=proj, num_layers=1, num_decoder_layers=1)
    model = check_family(hf, T5ForConditionalGeneration, tmp_path, padded_batch(97), **_decoder_inputs())
    assert model.cfg.activation == ours


def test_against_hf_t5_model_and_encoder_model(tmp_path):
    model = check_family(
        _t5(T5Model), T5Model, tmp_path / "seq2seq", padded_batch(97), field="last_hidden_state", **_decoder_inputs()
    )
    assert model.head is None and model.cfg.arch == "encoder_decoder"
    encoder = check_family(
        _t5(T5EncoderModel), T5EncoderModel, tmp_path / "encoder", padded_batch(97), field="last_hidden_state"
    )
    assert encoder.cfg.arch == "encoder" and encoder.head is None and not hasattr(encoder, "decoder")


def test_against_hf_mt5(tmp_path):
    hf = _t5(MT5ForConditionalGeneration, MT5Config, num_layers=1, num_decoder_layers=1)
    model = check_family(hf, MT5ForConditionalGeneration, tmp_path, padded_batch(97), **_decoder_inputs())
    assert model.cfg.hf_model_type == "mt5" and model.cfg.activation == "geglu_tanh"


@pytest.mark.parametrize(
    "changes", [{}, {"activation": "geglu", "tie_embeddings": False}], ids=["preset", "exact-geglu-untied"]
)
def test_t5_preset_exports_to_transformers(tmp_path, changes):
    cfg = pf.Config.preset(
        "t5",
        vocab_size=97,
        d_model=32,
        n_layers=2,
        n_decoder_layers=2,
        n_heads=4,
        d_head=8,
        d_ff=40,
        dropout=0.0,
        position_params={"num_buckets": 8, "max_distance": 20},
        init_std=0.2,
        **changes,
    )
    torch.manual_seed(0)
    model = _randomize(pf.Transformer(cfg)).eval()
    hf = round_trip(model, T5ForConditionalGeneration, tmp_path)
    assert_same_outputs(model, hf, padded_batch(97), **_decoder_inputs())
    again = pf.from_hf(tmp_path)
    assert again.cfg.activation == cfg.activation and again.cfg.tie_embeddings == cfg.tie_embeddings


def test_t5_unknown_feed_forward_is_refused(tmp_path):
    from posformer.hf.t5 import config_from_hf

    hf = {"model_type": "t5", **SIZES, "feed_forward_proj": "gated-gelu_10"}
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="feed_forward_proj='gated-gelu_10'"):
        config_from_hf(hf)


def test_t5_to_hf_names_what_t5_cannot_express(tmp_path):
    cfg = pf.Config.preset(
        "t5", vocab_size=97, d_model=32, n_layers=1, n_heads=4, d_head=8, d_ff=40, norm_placement="post", qkv_bias=True
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="norm_placement='post'.*qkv_bias=True"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)


def test_t5_greedy_generation_matches_transformers(tmp_path):
    hf = _t5(num_layers=2, num_decoder_layers=2).eval()  # HF sizes its cache by num_layers
    hf.save_pretrained(tmp_path)
    model = pf.from_hf(tmp_path)
    batch = padded_batch(97)
    theirs = hf.generate(**batch, max_new_tokens=8, do_sample=False, num_beams=1)
    ours = model.generate(batch["input_ids"], max_new_tokens=8, attention_mask=batch["attention_mask"])
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize(
    "changes, name",
    [({"separate_decoder_embeddings": True}, "separate_decoder_embeddings=True")] + PLAIN_STACK_REFUSALS,
)
def test_to_hf_refuses_what_t5_has_no_key_for(tmp_path, changes, name):
    """T5's two stacks read one `shared` embedding; no QK-norm, window or head transform."""
    cfg = pf.from_hf(save_hf(_t5(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")
