"""Named configurations from the papers and checkpoints posformer reproduces.

Each preset is a dict of `Config` fields; `Config.preset(name, **overrides)`
applies the overrides on top. A preset's `position_params` are those of its own
encoding: `Config.preset("llama", position="alibi")` is ALiBi with its defaults.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # "Attention Is All You Need", Transformer base (Vaswani et al. 2017, table 3).
    "vanilla": dict(
        arch="encoder_decoder",
        vocab_size=37000,
        d_model=512,
        n_layers=6,
        n_decoder_layers=6,
        n_heads=8,
        d_ff=2048,
        position="sinusoidal",
        max_positions=512,
        norm="layernorm",
        norm_placement="post",
        activation="relu",
        dropout=0.1,
        tie_embeddings=True,
        scale_embeddings=True,
        pad_token_id=0,
        decoder_start_token_id=0,
    ),
    # bert-base-uncased.
    "bert": dict(
        arch="encoder",
        vocab_size=30522,
        d_model=768,
        n_layers=12,
        n_heads=12,
        d_ff=3072,
        position="learned",
        max_positions=512,
        norm="layernorm",
        norm_eps=1e-12,
        norm_placement="post",
        embed_norm=True,
        activation="gelu",
        dropout=0.1,
        attention_dropout=0.1,
        type_vocab_size=2,
        pad_token_id=0,
        tie_embeddings=True,
    ),
    # GPT-2 small (124M).
    "gpt2": dict(
        arch="decoder",
        vocab_size=50257,
        d_model=768,
        n_layers=12,
        n_heads=12,
        d_ff=3072,
        position="learned",
        max_positions=1024,
        norm="layernorm",
        norm_eps=1e-5,
        norm_placement="pre",
        activation="gelu_tanh",
        dropout=0.1,
        attention_dropout=0.1,
        tie_embeddings=True,
        bos_token_id=50256,
        eos_token_id=50256,
        hf_model_type="gpt2",
    ),
    # LLaMA-2 7B shape: RMSNorm pre-norm, SwiGLU, RoPE, no biases, untied head.
    "llama": dict(
        arch="decoder",
        vocab_size=32000,
        d_model=4096,
        n_layers=32,
        n_heads=32,
        d_ff=11008,
        position="rope",
        position_params={"theta": 10000.0},
        max_positions=4096,
        norm="rmsnorm",
        norm_eps=1e-5,
        norm_placement="pre",
        activation="swiglu",
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        tie_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    ),
    # t5-small (v1.0): RMS-style norm without mean subtraction, pre-norm, ReLU, relative bias, scale 1.0,
    # and T5's fan-in init (which the scale 1.0 needs).
    "t5": dict(
        arch="encoder_decoder",
        vocab_size=32128,
        d_model=512,
        n_layers=6,
        n_decoder_layers=6,
        n_heads=8,
        d_head=64,
        d_ff=2048,
        position="t5",
        position_params={"num_buckets": 32, "max_distance": 128},
        max_positions=512,
        norm="rmsnorm",
        norm_eps=1e-6,
        norm_placement="pre",
        activation="relu",
        dropout=0.1,
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        attn_scale=1.0,
        tie_embeddings=True,
        scale_tied_head=True,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        init="t5",
        hf_model_type="t5",
    ),
    # The hand-written encoder of the study notes: bert-base-uncased sizes, pre-LayerNorm.
    "seed-encoder": dict(
        arch="encoder",
        vocab_size=30522,
        d_model=768,
        n_layers=12,
        n_heads=12,
        d_ff=3072,
        position="learned",
        max_positions=512,
        norm="layernorm",
        norm_placement="pre",
        activation="gelu",
        pad_token_id=0,
        tie_embeddings=True,
    ),
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def preset_fields(name: str) -> dict[str, Any]:
    """The fields of preset `name` (a fresh copy). Raises `ValueError` for an unknown name."""
    from posformer import positions

    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: expected one of {', '.join(preset_names())}")
    fields = dict(PRESETS[name])
    if fields["position"] not in positions.names():
        raise ValueError(
            f"preset {name!r} needs position encoding {fields['position']!r}, which is not yet available "
            f"in this version (available: {', '.join(positions.names())})"
        )
    # The preset's parameters belong to the preset's encoding: overriding `position` starts afresh.
    fields["position_params"] = positions.PositionParams(fields["position"], fields.get("position_params", {}))
    return fields
