"""EXAONE 4: LLaMA's projections with local RoPE layers and global NoPE layers, RMSNorm on each sub-layer's
output and per-head QK-norm.

With a `sliding_window`, each layer is "sliding_attention" (a window of `sliding_window` tokens, RoPE) or
"full_attention" (no position encoding at all), as `layer_types` lists them (by default every
`sliding_window_pattern`-th layer, 4, is global): posformer's `Config.layer_types`, the config's own RoPE being
the local one. Without one (`sliding_window=None`), every layer is global and rotates. RoPE is the config's
`rope_theta` and any `rope_scaling`. A layer is x + norm(attn(x)), then x + norm(mlp(x)): no norm before
attention or the FFN, the sub-layer's output normalised before the residual adds it
(`Config.norm_placement="output"`). `q_norm` / `k_norm` normalise each head's query and key before RoPE
(`Config.qk_norm`). No biases; the FFN is SwiGLU. Heads: Exaone4ForCausalLM (causal_lm), Exaone4Model (none).
A string `sliding_window_pattern` ("LLLG") without `layer_types`, which transformers 4.57.6 cannot read, and
sliding layers without a window are refused.
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layer_kinds import GLOBAL, LOCAL, checked_layer_types, layers_to_hf
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
from posformer.hf.rope import rope_params, rope_to_hf

MODEL_TYPE = "exaone4"
DEFAULT_WINDOW = 4096  # Exaone4Config's: written when every layer is a global NoPE one


def _layer_types(hf: dict, window: int | None) -> list[str]:
    """`layer_types`, or transformers 4.57.6's default: global every `sliding_window_pattern`-th layer, every
    layer without a window."""
    n = hf["num_hidden_layers"]
    types = hf.get("layer_types")
    if not types:
        pattern = hf.get("sliding_window_pattern", 4)
        if window is not None and not isinstance(pattern, int):
            raise unsupported(
                MODEL_TYPE, f"sliding_window_pattern={pattern!r} without layer_types (transformers 4.57.6 reads ints)"
            )
        types = [LOCAL if window is not None and (i + 1) % pattern else GLOBAL for i in range(n)]
    types = checked_layer_types(types, n, MODEL_TYPE)
    if window is None and LOCAL in types:
        raise unsupported(MODEL_TYPE, f"layer_types with {LOCAL!r} layers and sliding_window=None")
    return types


def _layers(hf: dict) -> dict:
    """The Config fields of the layer kinds: none without a window (every layer rotates), else local RoPE layers
    with the window and global NoPE layers."""
    window = hf.get("sliding_window", DEFAULT_WINDOW)
    types = _layer_types(hf, window)
    if window is None:
        return {}
    settings = {LOCAL: {"sliding_window": window}, GLOBAL: {"position": "none"}}
    return {"layer_types": types, "layer_settings": {label: settings[label] for label in dict.fromkeys(types)}}


def config_from_hf(hf: dict) -> Config:
    activation = hf.get("hidden_act", "silu")
    if activation not in GATED:
        raise unsupported(MODEL_TYPE, f"hidden_act={activation!r} (supported: {', '.join(GATED)})")
    return Config(
        **llama_like_from_hf(hf),
        d_head=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        position_params=rope_params(hf),
        **_layers(hf),
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-5),
        norm_placement="output",
        activation=GATED[activation],
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        qk_norm=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        pad_token_id=hf.get("pad_token_id"),
        bos_token_id=hf.get("bos_token_id", 0),
        eos_token_id=first_token_id(hf.get("eos_token_id", 2)),
        hf_model_type=MODEL_TYPE,
    )


def _layers_to_hf(cfg: Config) -> dict:
    """`layer_types` and `sliding_window`: every layer global with the config's RoPE (no window), or local ones
    with the config's RoPE and one window and global ones without position encoding."""
    layers = cfg.layer_configs(cfg.n_layers)
    if any(layer.query_temperature is not None for layer in layers):
        raise unsupported(MODEL_TYPE, "a query temperature (to_hf)")
    if all(c.position == "rope" and c.position_params == cfg.position_params and not c.sliding_window for c in layers):
        return {"layer_types": [GLOBAL] * cfg.n_layers, "sliding_window": None}

    def kind(layer: Config) -> str | None:
        if layer.position == "none" and layer.sliding_window is None:
            return GLOBAL
        own_rope = layer.position == "rope" and layer.position_params == cfg.position_params
        return LOCAL if own_rope and layer.sliding_window else None

    expected = (
        "local ones (the config's RoPE and a sliding window) and global ones (no position encoding, no window), "
        "or than global ones with the config's RoPE only"
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
        parallel_residual=False,
        qk_norm=True,
        qk_norm_over="head",
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        scale_embeddings=False,
        type_vocab_size=0,
        head_bias=False,
        head_transform=False,
        scale_tied_head=False,
    )
    if cfg.activation not in HIDDEN_ACT or cfg.position_params.get("layout") != "half":
        raise unsupported(MODEL_TYPE, "a FFN other than a gated one, or RoPE's interleaved layout (to_hf)")
    require_default_scale(cfg, MODEL_TYPE)
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "Exaone4"),
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        **rope_to_hf(cfg),
        **_layers_to_hf(cfg),
    }


def rules(cfg: Config) -> list[Rule]:
    return decoder_rules(cfg, separate_projections(cfg), output_norms)


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore))
