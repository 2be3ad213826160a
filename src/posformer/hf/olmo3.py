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

transformers 5 gives the sliding layers a RoPE of their own: `rope_parameters` keyed by layer type, which it writes,
and which it fills from v4's keys with `rope_theta` and `rope_scaling` for the global layers only, the sliding ones
getting its default theta, 500000 (`Olmo3Config.default_theta`). A config is read as the transformers that wrote it
meant it (`versions.writer_major`): a v4-form one from 4.x (or unrecorded) with the global theta unscaled on the
sliding layers, from 5.x with 500000; a flat `rope_parameters` (which 5 ignores for Olmo 3) from 5.x is refused.
`to_hf` writes the nested form for transformers 5, and for 4 the v4 form, refusing sliding layers whose RoPE is
not the global one without its scaling.
"""

from __future__ import annotations

from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layer_kinds import GLOBAL, LOCAL, layer_types_from_hf, layers_to_hf
from posformer.hf.layout import require_default_scale, require_fields, require_head
from posformer.hf.llama import (
    GATED,
    HIDDEN_ACT,
    decoder_rules,
    first_token_id,
    ignore,
    llama_like_from_hf,
    llama_like_to_hf,
    output_norms,
    separate_projections,
)
from posformer.hf.mapping import Rule
from posformer.hf.rope import has_v5_layer_params, rope_params, rope_to_hf, v5_rope_parameters
from posformer.hf.versions import writer_major

MODEL_TYPE = "olmo3"
DEFAULT_WINDOW = 4096  # Olmo3Config's: written when no layer slides (transformers builds the mask regardless)
V5_LOCAL_THETA = 500000.0  # transformers 5's Olmo3Config.default_theta: its sliding layers' theta in a v4-form config


def _layer_types(hf: dict) -> list[str]:
    """`layer_types`, or transformers 4.57.6's default: global every 4th layer."""
    return layer_types_from_hf(hf, MODEL_TYPE, 4)


def _local_rope(hf: dict, global_rope: dict) -> dict:
    """The RoPE of the sliding layers: v5's own entry for them, else, in v4's form, the global RoPE without its
    scaling (transformers 4) or with transformers 5's default theta (a config it wrote)."""
    if has_v5_layer_params(hf, LOCAL):
        return rope_params(hf, layer_type=LOCAL)
    if writer_major(hf) == 5:
        if isinstance(hf.get("rope_parameters"), dict):
            raise unsupported(
                MODEL_TYPE,
                f"rope_parameters={hf['rope_parameters']} not keyed by layer type ({GLOBAL!r}, {LOCAL!r}) in a "
                "transformers 5 config, which transformers 5 ignores for Olmo 3",
            )
        return {"theta": V5_LOCAL_THETA, "layout": "half"}
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
        **llama_like_from_hf(hf),
        d_head=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        position_params=global_rope,
        layer_types=types,
        layer_settings={LOCAL: local} if LOCAL in types else {},
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-5),
        norm_placement="output",
        activation=GATED[activation],
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=False,
        qk_norm=True,
        qk_norm_over="projection",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        pad_token_id=hf.get("pad_token_id", 1),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=first_token_id(hf.get("eos_token_id", 50279)),
        hf_model_type=MODEL_TYPE,
    )


def _layers_to_hf(cfg: Config) -> tuple[dict, dict | None]:
    """(`layer_types` and `sliding_window`, the sliding layers' RoPE `position_params` or None when none slides):
    global layers use the config's own RoPE and no window, local ones one window and one RoPE of their own."""
    local_ropes: list[dict] = []

    def kind(layer: Config) -> str | None:
        if layer.position != "rope" or layer.query_temperature is not None:
            return None
        if layer.sliding_window is None and layer.position_params == cfg.position_params:
            return GLOBAL
        if layer.sliding_window is None or layer.position_params.get("layout") != "half":
            return None
        local_ropes.append(layer.position_params)
        return LOCAL

    expected = "global ones (the config's RoPE, no window) and local ones (a sliding window, RoPE in half layout)"
    layers = layers_to_hf(cfg, MODEL_TYPE, kind, expected, DEFAULT_WINDOW)
    if any(rope != local_ropes[0] for rope in local_ropes):
        raise unsupported(MODEL_TYPE, "sliding layers with RoPE settings that differ (to_hf)")
    return layers, (local_ropes[0] if local_ropes else None)


def _nested_rope(cfg: Config, local: dict) -> dict:
    """transformers 5's `rope_parameters` of `cfg`'s global RoPE and the sliding layers' `local` one, keyed by
    layer type, with `max_position_embeddings` (refused where the two RoPEs would need different ones)."""
    full, sliding = rope_to_hf(cfg), rope_to_hf(cfg.replace(position_params=local))
    if full["max_position_embeddings"] != sliding["max_position_embeddings"]:
        raise unsupported(
            MODEL_TYPE,
            f"sliding layers' RoPE {local} and global {cfg.position_params} whose scalings need different "
            "max_position_embeddings (to_hf)",
        )
    return {
        "max_position_embeddings": full["max_position_embeddings"],
        "rope_parameters": {
            GLOBAL: v5_rope_parameters(full)["rope_parameters"],
            LOCAL: v5_rope_parameters(sliding)["rope_parameters"],
        },
    }


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
    require_default_scale(cfg, MODEL_TYPE)
    layers, local = _layers_to_hf(cfg)
    unscaled = {**cfg.position_params, "scaling": None}
    rope = rope_to_hf(cfg) if local is None or local == unscaled else _nested_rope(cfg, local)
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "Olmo3"),
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        **rope,
        **layers,
    }


def rules(cfg: Config) -> list[Rule]:
    return decoder_rules(cfg, separate_projections(cfg), output_norms)


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """The RoPE settings in the form of the transformers the export is for: for 5, `rope_parameters` keyed by layer
    type (the sliding layers' entry the global RoPE without its scaling, where `config_to_hf` wrote one RoPE); for
    4, v4's keys, refusing sliding layers with a RoPE of their own."""
    params = hf.get("rope_parameters")
    nested = isinstance(params, dict) and isinstance(params.get(LOCAL), dict)
    if writer_major(hf, "to_hf") < 5:
        if nested:
            raise unsupported(
                MODEL_TYPE,
                f"sliding layers whose RoPE ({params[LOCAL]}) is not the global one ({params[GLOBAL]}) without its "
                "scaling, for transformers 4, which rotates them with the global theta (to_hf) (transformers 5 "
                "gives them their own: transformers_version='5.24.0')",
            )
        return
    if nested:
        return
    if params is None:
        params = v5_rope_parameters(hf).pop("rope_parameters")
        for key in ("rope_theta", "rope_scaling", "partial_rotary_factor"):
            hf.pop(key, None)
    hf["rope_parameters"] = {GLOBAL: params, LOCAL: {"rope_type": "default", "rope_theta": params["rope_theta"]}}


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, finish_export=finish_export))
