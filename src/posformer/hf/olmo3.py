"""Olmo 3: LLaMA's projections with local and global layers, RMSNorm on each sub-layer's output and QK-norm over
the whole projections.

Each layer is "sliding_attention" (a window of `sliding_window` tokens, default RoPE: `rope_theta` without any
scaling) or "full_attention" (RoPE with `rope_theta` and `rope_scaling`), as `layer_types` lists them (by default
every 4th layer is global): posformer's `Config.layer_types`, the config's own RoPE being the global one. A layer
is x + norm(attn(x)), then x + norm(mlp(x)): no norm before attention or the FFN, the sub-layer's output
normalised before the residual adds it (`Config.norm_placement="output"`). `q_norm` is one RMSNorm over all the
query heads together (num_attention_heads * head_dim) and `k_norm` over all the key heads, applied to the
projections before the split into heads and before RoPE (`Config.qk_norm_over="projection"`). `attention_bias`
gives q/k/v/o biases; the FFN is SwiGLU without biases. Heads: Olmo3ForCausalLM (causal_lm), Olmo3Model (none).
`sliding_window=None` (transformers 4.57.6 builds the sliding mask regardless, and fails) is refused.
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.layer_kinds import GLOBAL, LOCAL, layer_types_from_hf, layers_to_hf
from posformer.hf.layout import require_fields, require_head
from posformer.hf.llama import (
    GATED,
    HIDDEN_ACT,
    decoder_rules,
    first_token_id,
    ignore,
    output_norms,
    separate_projections,
)
from posformer.hf.mapping import Rule
from posformer.hf.rope import has_v5_layer_params, rope_params, rope_to_hf

MODEL_TYPE = "olmo3"
HEADS = {"ForCausalLM": "causal_lm", "Model": "none"}
DEFAULT_WINDOW = 4096  # Olmo3Config's: written when no layer slides (transformers builds the mask regardless)


def _layer_types(hf: dict) -> list[str]:
    """`layer_types`, or transformers 4.57.6's default: global every 4th layer."""
    return layer_types_from_hf(hf, MODEL_TYPE, 4)


def _local_rope(hf: dict, global_rope: dict) -> dict:
    """The RoPE of the sliding layers: v5's own entry for them, else the global RoPE without its scaling."""
    if has_v5_layer_params(hf, LOCAL):
        return rope_params(hf, layer_type=LOCAL)
    return {key: value for key, value in global_rope.items() if key != "scaling"}


def config_from_hf(hf: dict) -> Config:
    activation = hf.get("hidden_act", "silu")
    if activation not in GATED:
        raise unsupported(MODEL_TYPE, f"hidden_act={activation!r} (supported: {', '.join(GATED)})")
    window = hf.get("sliding_window", DEFAULT_WINDOW)
    if window is None:
        raise unsupported(MODEL_TYPE, "sliding_window=None (transformers 4.57.6 needs one for its sliding mask)")
    types = _layer_types(hf)
    global_rope = rope_params(hf, layer_type=GLOBAL)
    local = {"sliding_window": window, "position_params": _local_rope(hf, global_rope)}
    bias = bool(hf.get("attention_bias", False))
    return Config(
        arch="decoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        d_head=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        position="rope",
        position_params=global_rope,
        layer_types=types,
        layer_settings={LOCAL: local} if LOCAL in types else {},
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-5),
        norm_placement="output",
        activation=GATED[activation],
        attention_dropout=hf.get("attention_dropout", 0.0),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=False,
        qk_norm=True,
        qk_norm_over="projection",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        head=architecture(hf, HEADS, "causal_lm"),
        pad_token_id=hf.get("pad_token_id", 1),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=first_token_id(hf.get("eos_token_id", 50279)),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=MODEL_TYPE,
    )


def _layers_to_hf(cfg: Config) -> dict:
    """`layer_types` and `sliding_window`: global layers use the config's own RoPE and no window, local ones one
    window and the same RoPE without its scaling."""
    local_rope = {**cfg.position_params, "scaling": None}

    def kind(layer: Config) -> str | None:
        if layer.position != "rope" or layer.query_temperature is not None:
            return None
        if layer.sliding_window is None and layer.position_params == cfg.position_params:
            return GLOBAL
        return LOCAL if layer.sliding_window is not None and layer.position_params == local_rope else None

    expected = (
        "global ones (the config's RoPE, no window) and local ones (a sliding window, the config's RoPE without "
        "scaling)"
    )
    return layers_to_hf(cfg, MODEL_TYPE, kind, expected, DEFAULT_WINDOW)


def config_to_hf(cfg: Config) -> dict:
    require_head(cfg, MODEL_TYPE)
    require_fields(
        cfg,
        MODEL_TYPE,
        arch="decoder",
        position="rope",
        norm="rmsnorm",
        norm_placement="output",
        use_final_norm=True,
        embed_norm=False,
        qk_norm=True,
        qk_norm_over="projection",
        attn_out_bias=cfg.qkv_bias,
        ffn_bias=False,
        scale_embeddings=False,
        type_vocab_size=0,
        head_bias=False,
        head_transform=False,
        scale_tied_head=False,
        query_temperature=None,
    )
    if cfg.activation not in HIDDEN_ACT or cfg.position_params.get("layout") != "half":
        raise unsupported(MODEL_TYPE, "a FFN other than a gated one, or RoPE's interleaved layout (to_hf)")
    if abs(cfg.scale - cfg.head_dim**-0.5) > 1e-12:
        raise unsupported(MODEL_TYPE, f"an attention scale other than head_dim ** -0.5: {cfg.scale} (to_hf)")
    return {
        "model_type": MODEL_TYPE,
        "architectures": ["Olmo3ForCausalLM" if cfg.head_kind == "causal_lm" else "Olmo3Model"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.ff_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        "attention_dropout": cfg.attention_dropout,
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.init_std,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        **rope_to_hf(cfg),
        **_layers_to_hf(cfg),
    }


def rules(cfg: Config) -> list[Rule]:
    return decoder_rules(cfg, separate_projections(cfg), output_norms)


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore))
