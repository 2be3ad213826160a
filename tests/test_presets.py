"""Presets: the published sizes, overrides, and the errors of bad overrides."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.presets import preset_names

TINY = dict(vocab_size=32, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_positions=16)

AVAILABLE_PRESETS = ["vanilla", "bert", "gpt2", "llama", "seed-encoder"]


def test_preset_vanilla():
    cfg = pf.Config.preset("vanilla")
    assert cfg.arch == "encoder_decoder"
    assert (cfg.d_model, cfg.n_layers, cfg.decoder_layers, cfg.n_heads, cfg.ff_dim) == (512, 6, 6, 8, 2048)
    assert cfg.norm == "layernorm" and cfg.norm_placement == "post"
    assert cfg.activation == "relu"
    assert cfg.position == "sinusoidal"
    assert cfg.head_dim == 64
    assert not cfg.use_final_norm


def test_preset_bert():
    cfg = pf.Config.preset("bert")
    assert cfg.arch == "encoder"
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.ff_dim) == (30522, 768, 12, 12, 3072)
    assert cfg.position == "learned" and cfg.max_positions == 512
    assert cfg.norm == "layernorm" and cfg.norm_placement == "post"
    assert cfg.type_vocab_size == 2
    assert cfg.head_kind == "masked_lm"


def test_preset_gpt2():
    cfg = pf.Config.preset("gpt2")
    assert cfg.arch == "decoder"
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.ff_dim) == (50257, 768, 12, 12, 3072)
    assert cfg.norm_placement == "pre" and cfg.norm == "layernorm"
    assert cfg.activation == "gelu_tanh"
    assert cfg.position == "learned" and cfg.max_positions == 1024
    assert cfg.tie_embeddings


def test_preset_llama():
    cfg = pf.Config.preset("llama")
    assert cfg.arch == "decoder"
    assert cfg.norm == "rmsnorm" and cfg.norm_placement == "pre"
    assert cfg.activation == "swiglu"
    assert cfg.position == "rope"
    assert not cfg.qkv_bias and not cfg.attn_out_bias and not cfg.ffn_bias
    assert not cfg.tie_embeddings
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.ff_dim) == (4096, 32, 32, 11008)


def test_preset_seed_encoder():
    cfg = pf.Config.preset("seed-encoder")
    assert cfg.arch == "encoder"
    assert (cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.ff_dim) == (30522, 768, 12, 12, 3072)
    assert cfg.norm == "layernorm" and cfg.norm_placement == "pre"
    assert cfg.activation == "gelu"
    assert cfg.position == "learned"


def test_preset_returns_fresh_copies():
    a = pf.Config.preset("llama")
    a.position_params["theta"] = 1.0e6
    assert pf.Config.preset("llama").position_params["theta"] == 10000.0


def test_preset_overrides_apply():
    cfg = pf.Config.preset(
        "gpt2",
        vocab_size=64,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        max_positions=8,
        bos_token_id=63,
        eos_token_id=63,
    )
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.ff_dim) == (64, 32, 2, 4, 48)
    assert cfg.activation == "gelu_tanh"  # untouched fields keep the preset's value


def test_preset_override_shrinking_vocab_below_special_ids_keeps_the_ids():
    # gpt2's bos/eos id is 50256: like GPT2Config(vocab_size=64), the ids stay, as metadata no token can match.
    cfg = pf.Config.preset("gpt2", vocab_size=64, d_model=32, n_layers=1, n_heads=4)
    assert (cfg.bos_token_id, cfg.eos_token_id) == (50256, 50256)
    prompt = torch.randint(0, 64, (1, 3))
    assert pf.Transformer(cfg).generate(prompt, max_new_tokens=6).shape == (1, 9)


def _run_tiny(cfg: pf.Config) -> None:
    torch.manual_seed(0)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 5))
    with torch.no_grad():
        out = model(ids, labels=ids)
    assert out.logits.shape == (2, 5, cfg.vocab_size)
    assert torch.isfinite(out.loss)


def test_preset_llama_small_override_builds_and_runs():
    cfg = pf.Config.preset("llama", vocab_size=100, d_model=64, n_layers=2, n_heads=4, d_ff=128)
    assert cfg.kv_heads == 4
    _run_tiny(cfg)


def test_preset_llama_small_override_with_kv_heads_builds_and_runs():
    cfg = pf.Config.preset("llama", vocab_size=100, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=128)
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.ff_dim) == (100, 64, 2, 4, 128)
    assert cfg.activation == "swiglu" and cfg.position == "rope"
    _run_tiny(cfg)


@pytest.mark.parametrize("name", ["bert", "gpt2", "seed-encoder", "vanilla"])
def test_small_presets_build_and_run(name):
    overrides = dict(vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_ff=48, max_positions=8)
    if name == "vanilla":
        overrides.update(n_decoder_layers=1, decoder_start_token_id=0)
    if name == "gpt2":
        overrides.update(bos_token_id=63, eos_token_id=63)
    _run_tiny(pf.Config.preset(name, **overrides))


def test_preset_t5():
    cfg = pf.Config.preset(
        "t5", vocab_size=64, d_model=32, n_layers=1, n_decoder_layers=1, n_heads=4, d_head=8, d_ff=48, max_positions=8
    )
    assert cfg.position == "t5" and cfg.arch == "encoder_decoder"
    _run_tiny(cfg)


def test_unknown_preset_lists_presets():
    with pytest.raises(ValueError) as info:
        pf.Config.preset("gpt5")
    message = str(info.value)
    assert "gpt5" in message
    for name in preset_names():
        assert name in message


def test_preset_bad_override_names_field():
    with pytest.raises(ValueError, match="dropout"):
        pf.Config.preset("bert", dropout=2.0)
    with pytest.raises(ValueError, match="not_a_field"):
        pf.Config.preset("bert", not_a_field=1)
