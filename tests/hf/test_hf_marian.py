"""Marian (MarianMTModel, MarianModel) against transformers 4.57.6 and 5: post-norm, half-layout sinusoids, logits
bias; untied, the embeddings of each version (5: one per stack, and `shared`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import MarianConfig, MarianModel, MarianMTModel

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
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=40,
    decoder_ffn_dim=40,
    max_position_embeddings=64,
    dropout=0.0,
    init_std=0.2,
    pad_token_id=96,
    decoder_start_token_id=96,
    eos_token_id=1,
    forced_eos_token_id=None,
    activation_function="swish",
    scale_embedding=True,
)


def _randomize(model: torch.nn.Module) -> torch.nn.Module:
    """LayerNorm weights and biases, linear biases and final_logits_bias (HF: 1 and 0), so mapping mistakes show."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layer_norm.weight" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                param.normal_(0.0, 0.3)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_(0.0, 1.0)
    return model


def _marian(cls=MarianMTModel, **changes):
    torch.manual_seed(0)
    return _randomize(cls(MarianConfig(**{**SIZES, **changes}, attn_implementation="eager")))


def _decoder_inputs() -> dict[str, torch.Tensor]:
    """Decoder ids (3, 7) with a full, a right-padded and a left-padded row."""
    batch = padded_batch(97, length=7, seed=1)
    return {"decoder_input_ids": batch["input_ids"], "decoder_attention_mask": batch["attention_mask"]}


def test_against_hf_marian(tmp_path):
    model = check_family(_marian(), MarianMTModel, tmp_path, padded_batch(97), **_decoder_inputs())
    cfg = model.cfg
    assert cfg.norm_placement == "post" and not cfg.use_final_norm and cfg.scale_embeddings and cfg.head_bias
    assert cfg.activation == "silu" and model.head.proj.weight is model.embed_tokens.weight
    assert (cfg.pad_token_id, cfg.eos_token_id, cfg.decoder_start_token_id) == (96, 1, 96)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_against_hf_marian_untied_unscaled(tmp_path, activation):
    hf = _marian(
        tie_word_embeddings=False,
        scale_embedding=False,
        activation_function=activation,
        encoder_layers=1,
        decoder_layers=1,
    )
    model = check_family(hf, MarianMTModel, tmp_path, padded_batch(97), **_decoder_inputs())
    assert model.cfg.activation == activation and model.head.proj.weight is not model.embed_tokens.weight
    assert model.cfg.separate_decoder_embeddings == TRANSFORMERS_5  # 5: each stack its own, both saved


def _untied(tmp_path: Path) -> pf.Transformer:
    """An untied model whose stacks share one embedding (transformers 4's untied Marian)."""
    hf = _marian(tie_word_embeddings=False, encoder_layers=1, decoder_layers=1)
    model = pf.from_hf(save_hf(hf, tmp_path / "hf"))
    return model if not TRANSFORMERS_5 else pf.Transformer(model.cfg.replace(separate_decoder_embeddings=False))


@pytest.mark.parametrize("version", ["4.57.6", "5.24.0"])
def test_marian_untied_export_for_each_version(tmp_path, version):
    """Untied, one embedding for both stacks: `shared` alone for 4, `shared` and each stack's copy for 5 (which
    fills none of them from `shared`); read back as the same model, and by the installed transformers alike."""
    model = _untied(tmp_path).eval()
    pf.to_hf(model, tmp_path / "out", transformers_version=version)
    stored = set(load_file(tmp_path / "out" / "model.safetensors"))
    stacks = {f"model.{stack}.embed_tokens.weight" for stack in ("encoder", "decoder")}
    assert "model.shared.weight" in stored and (stacks <= stored) == version.startswith("5")
    assert pf.from_hf(tmp_path / "out").cfg == model.cfg
    if version.startswith("5") == TRANSFORMERS_5:
        reloaded = MarianMTModel.from_pretrained(tmp_path / "out", attn_implementation="eager").eval()
        assert_same_outputs(model, reloaded, padded_batch(97), **_decoder_inputs())


def test_marian_separate_decoder_embeddings_export_for_5_only(tmp_path):
    """A decoder with embeddings of its own: transformers 5's untied Marian, which 4 cannot express."""
    model = _untied(tmp_path)
    torch.manual_seed(2)
    separate = pf.Transformer(model.cfg.replace(separate_decoder_embeddings=True)).eval()
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="separate_decoder_embeddings=True for transformers 4"):
        pf.to_hf(separate, tmp_path / "out4", transformers_version="4.57.6")
    pf.to_hf(separate, tmp_path / "out5", transformers_version="5.24.0")
    again = pf.from_hf(tmp_path / "out5")
    assert again.cfg == separate.cfg
    assert_same_outputs(again, separate, padded_batch(97), **_decoder_inputs())
    tied = pf.Transformer(separate.cfg.replace(tie_embeddings=True))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="separate_decoder_embeddings=True with tie_embeddings"):
        pf.to_hf(tied, tmp_path / "tied", transformers_version="5.24.0")


def test_against_hf_marian_model(tmp_path):
    model = check_family(
        _marian(MarianModel), MarianModel, tmp_path, padded_batch(97), field="last_hidden_state", **_decoder_inputs()
    )
    assert model.head is None


def test_sinusoidal_half_layout_is_marians_table():
    hf = _marian(encoder_layers=1, decoder_layers=1, max_position_embeddings=512)
    ours = pf.positions.sinusoidal_table(512, 32, layout="half")
    torch.testing.assert_close(ours, hf.model.encoder.embed_positions.weight, rtol=0, atol=1e-4)
    torch.testing.assert_close(ours[:64], hf.model.encoder.embed_positions.weight[:64], rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "changes, feature",
    [
        ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings=False"),
        ({"decoder_vocab_size": 50}, "decoder_vocab_size"),
        ({"decoder_ffn_dim": 48}, "encoder_ffn_dim=40 different from decoder_ffn_dim=48"),
        ({"activation_function": "tanh"}, "activation 'tanh'"),
    ],
)
def test_marian_unsupported_features_are_named(tmp_path, changes, feature):
    MarianConfig(**{**SIZES, **changes}).save_pretrained(tmp_path)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=feature):
        pf.from_hf(tmp_path)


def test_marian_to_hf_names_what_marian_cannot_express(tmp_path):
    cfg = pf.Config(
        arch="encoder_decoder",
        vocab_size=97,
        d_model=32,
        n_layers=1,
        n_heads=4,
        d_ff=40,
        position="sinusoidal",
        norm_placement="pre",
        hf_model_type="marian",
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="norm_placement='pre'.*final norm.*'layout': 'interleaved'"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)


def test_posformer_marian_layout_exports_to_transformers(tmp_path):
    cfg = pf.Config(
        arch="encoder_decoder",
        vocab_size=97,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=40,
        position="sinusoidal",
        position_params={"layout": "half"},
        norm_placement="post",
        activation="relu",
        scale_embeddings=True,
        init_std=0.2,
        pad_token_id=96,
        decoder_start_token_id=96,
        hf_model_type="marian",
    )
    torch.manual_seed(0)
    model = _randomize(pf.Transformer(cfg)).eval()
    hf = round_trip(model, MarianMTModel, tmp_path)
    assert_same_outputs(model, hf, padded_batch(97), **_decoder_inputs())


def test_marian_greedy_generation_matches_transformers(tmp_path):
    hf = _marian(encoder_layers=1, decoder_layers=2).eval()
    hf.save_pretrained(tmp_path)
    model = pf.from_hf(tmp_path)
    batch = padded_batch(97)
    theirs = hf.generate(**batch, max_new_tokens=8, do_sample=False, num_beams=1)
    ours = model.generate(batch["input_ids"], max_new_tokens=8, attention_mask=batch["attention_mask"])
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("changes, name", [({"norm_eps": 1e-6}, "norm_eps=1e-06")] + PLAIN_STACK_REFUSALS)
def test_to_hf_refuses_what_marian_has_no_key_for(tmp_path, changes, name):
    """Marian's LayerNorms keep torch's eps of 1e-5 (its config has none); no QK-norm, window or head transform."""
    cfg = pf.from_hf(save_hf(_marian(), tmp_path / "hf")).cfg
    assert_to_hf_refuses(cfg, changes, name, tmp_path / "out")


def test_marian_layer_norms_have_torch_default_eps():
    """Why `to_hf` refuses another `norm_eps`: transformers' Marian builds every LayerNorm with torch's default."""
    eps = {m.eps for m in _marian().modules() if isinstance(m, torch.nn.LayerNorm)}
    assert eps == {torch.nn.LayerNorm(4).eps} == {1e-5}
