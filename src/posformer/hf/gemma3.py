"""Gemma 3 (text): LLaMA's projections with local and global layers, sandwich norms and QK-norm.

Each layer is "sliding_attention" (a window of `sliding_window` tokens, RoPE with base `rope_local_base_freq`
and no scaling) or "full_attention" (RoPE with `rope_theta` and `rope_scaling`), as `layer_types` lists them
(by default every `sliding_window_pattern`-th layer, 6, is global): posformer's `Config.layer_types`, the
config's own RoPE being the global one. RMSNorm scales by 1 + weight in float32 ("rmsnorm_unit_offset"),
around attention and the FFN (four per layer: "sandwich") and over each head's q and k; the token embeddings
are multiplied by sqrt(hidden_size); the attention scale is `query_pre_attn_scalar` ** -0.5; the FFN is
GeGLU with tanh-GELU. Heads: Gemma3ForCausalLM (causal_lm), Gemma3TextModel (none). Logit soft-capping and
bidirectional attention (EmbeddingGemma) are refused.
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layer_kinds import GLOBAL, LOCAL, layer_types_from_hf
from posformer.hf.layout import require_decoder_layout
from posformer.hf.llama import (
    decoder_rules,
    first_token_id,
    ignore,
    llama_like_from_hf,
    llama_like_to_hf,
    separate_projections,
)
from posformer.hf.mapping import Rule, norm
from posformer.hf.rope import has_v5_layer_params, rope_params, rope_to_hf

MODEL_TYPE = "gemma3_text"
HEADS = {"ForCausalLM": "causal_lm", "TextModel": "none"}
ACTIVATIONS = {"gelu_pytorch_tanh": "geglu_tanh", "gelu": "geglu"}


def _layer_types(hf: dict) -> list[str]:
    """`layer_types`, or transformers 4.57.6's default: global every `sliding_window_pattern`-th layer (6)."""
    return layer_types_from_hf(hf, MODEL_TYPE, hf.get("sliding_window_pattern", 6))


def config_from_hf(hf: dict) -> Config:
    for feature in ("final_logit_softcapping", "attn_logit_softcapping"):
        if hf.get(feature) is not None:
            raise unsupported(MODEL_TYPE, f"{feature}={hf[feature]}")
    if hf.get("use_bidirectional_attention"):
        raise unsupported(MODEL_TYPE, "use_bidirectional_attention=True (EmbeddingGemma)")
    activation = hf.get("hidden_activation", "gelu_pytorch_tanh")
    if activation not in ACTIVATIONS:
        raise unsupported(MODEL_TYPE, f"hidden_activation={activation!r} (supported: {', '.join(ACTIVATIONS)})")
    types = _layer_types(hf)
    local_rope = (
        rope_params(hf, layer_type=LOCAL)
        if has_v5_layer_params(hf, LOCAL)
        else {"theta": float(hf.get("rope_local_base_freq", 10000.0)), "layout": "half"}
    )
    local = {"sliding_window": hf.get("sliding_window", 4096), "position_params": local_rope}
    bias = bool(hf.get("attention_bias", False))
    return Config(
        **llama_like_from_hf(hf, HEADS),
        d_head=hf.get("head_dim", 256),
        position_params=rope_params(hf, default_theta=1e6, layer_type=GLOBAL),
        layer_types=types,
        layer_settings={LOCAL: local} if LOCAL in types else {},
        max_positions=hf.get("max_position_embeddings", 131072),
        norm="rmsnorm_unit_offset",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        norm_placement="sandwich",
        activation=ACTIVATIONS[activation],
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=False,
        attn_scale=float(hf.get("query_pre_attn_scalar", 256)) ** -0.5,
        qk_norm=True,
        scale_embeddings=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        pad_token_id=hf.get("pad_token_id", 0),
        bos_token_id=hf.get("bos_token_id", 2),
        eos_token_id=first_token_id(hf.get("eos_token_id", 1)),
        hf_model_type=MODEL_TYPE,
    )


def _whole(value: float) -> float | int:
    """`value` as an int when float rounding alone kept it from one (256 ** -0.5 ** -2 = 256.00000000000006)."""
    return round(value) if abs(value - round(value)) < 1e-9 * max(1.0, abs(value)) else value


def _local_layers_to_hf(cfg: Config) -> dict:
    """`layer_types`, `sliding_window` and `rope_local_base_freq`: global layers use the config's own RoPE and
    no window; local ones one window and one unscaled RoPE base."""
    types, local = [], None
    for layer in cfg.layer_configs(cfg.n_layers):
        if layer.sliding_window is None and layer.position_params == cfg.position_params:
            types.append(GLOBAL)
            continue
        params = layer.position_params
        own = (layer.sliding_window, params.get("theta"))
        plain = (
            params.get("scaling") is None
            and params.get("layout") == "half"
            and params.get("rotary_fraction") == params.get("frequency_fraction") == 1.0
        )
        if layer.sliding_window is None or layer.position != "rope" or not plain or local not in (None, own):
            raise unsupported(
                MODEL_TYPE,
                "layers other than global ones (the config's RoPE, no window) and local "
                "ones (one window, one unscaled RoPE base) (to_hf)",
            )
        local = own
        types.append(LOCAL)
    out = {"layer_types": types}
    if local is not None:
        out["sliding_window"], out["rope_local_base_freq"] = local
    return out


def config_to_hf(cfg: Config) -> dict:
    if (
        cfg.position != "rope"
        or cfg.norm != "rmsnorm_unit_offset"
        or cfg.norm_placement != "sandwich"
        or not cfg.qk_norm
        or cfg.qk_norm_over != "head"
        or not cfg.scale_embeddings
        or cfg.activation not in ACTIVATIONS.values()
    ):
        raise unsupported(
            MODEL_TYPE,
            "a layout other than RoPE + unit-offset RMSNorm (sandwich, QK-norm) + GeGLU with scaled embeddings (to_hf)",
        )
    if cfg.qkv_bias != cfg.attn_out_bias or cfg.ffn_bias:
        raise unsupported(MODEL_TYPE, "attention biases on some projections only, or FFN biases (to_hf)")
    require_decoder_layout(
        cfg, MODEL_TYPE, norm="rmsnorm_unit_offset", norm_placement="sandwich", scale_embeddings=True
    )
    activation = {ours: theirs for theirs, ours in ACTIVATIONS.items()}[cfg.activation]
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "Gemma3", model="Gemma3TextModel"),
        "head_dim": cfg.head_dim,
        "hidden_activation": activation,
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        "query_pre_attn_scalar": _whole(cfg.scale**-2),
        **rope_to_hf(cfg),
        **_local_layers_to_hf(cfg),
    }


def _sandwich_norms(ours: str, theirs: str) -> list[Rule]:
    return [
        *norm(f"{ours}.attn_res.norm", f"{theirs}.input_layernorm", bias=False),
        *norm(f"{ours}.attn_res.post_norm", f"{theirs}.post_attention_layernorm", bias=False),
        *norm(f"{ours}.ffn_res.norm", f"{theirs}.pre_feedforward_layernorm", bias=False),
        *norm(f"{ours}.ffn_res.post_norm", f"{theirs}.post_feedforward_layernorm", bias=False),
    ]


def rules(cfg: Config) -> list[Rule]:
    return decoder_rules(cfg, separate_projections(cfg), _sandwich_norms)


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore))
