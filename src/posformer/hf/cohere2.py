"""Cohere2 (Command R7B): parallel blocks, local RoPE layers with a sliding window and global NoPE layers.

Each layer is "sliding_attention" (a window of `sliding_window` tokens, RoPE) or "full_attention" (no position
encoding at all), as `layer_types` lists them (by default every `sliding_window_pattern`-th layer, 4, is global):
posformer's `Config.layer_types`, the config's own RoPE being the local one. RoPE rotates the pairs (2i, 2i + 1)
(layout "interleaved"), with `rope_theta` and any `rope_scaling`. A layer is x + attn(ln(x)) + mlp(ln(x)) with
one LayerNorm without bias (`input_layernorm`) read by both posformer norms of the parallel block
(`Config.parallel_residual`); `to_hf` refuses two norms that differ. The FFN is SwiGLU; the logits are
multiplied by `logit_scale` (`Config.logit_scale`); the embeddings are tied by default. Heads:
Cohere2ForCausalLM (causal_lm), Cohere2Model (none). `sliding_window=None` (which transformers 4.57.6 cannot
run either) is refused.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layer_kinds import GLOBAL, LOCAL, layer_types_from_hf, layers_to_hf
from posformer.hf.layout import require_decoder_layout, require_default_scale
from posformer.hf.llama import (
    GATED,
    HIDDEN_ACT,
    decoder_rules,
    first_token_id,
    ignore,
    llama_like_from_hf,
    llama_like_to_hf,
    separate_projections,
)
from posformer.hf.mapping import Rule, norm
from posformer.hf.rope import rope_params, rope_to_hf

MODEL_TYPE = "cohere2"
DEFAULT_WINDOW = 4096  # Cohere2Config's: written when no layer slides (transformers builds the mask regardless)


def _layer_types(hf: dict) -> list[str]:
    """`layer_types`, or transformers 4.57.6's default: global every `sliding_window_pattern`-th layer (4)."""
    return layer_types_from_hf(hf, MODEL_TYPE, hf.get("sliding_window_pattern", 4))


def config_from_hf(hf: dict) -> Config:
    activation = hf.get("hidden_act", "silu")
    if activation not in GATED:
        raise unsupported(MODEL_TYPE, f"hidden_act={activation!r} (supported: {', '.join(GATED)})")
    window = hf.get("sliding_window", DEFAULT_WINDOW)
    if window is None:
        raise unsupported(MODEL_TYPE, "sliding_window=None (local layers without a window rotate nothing)")
    types = _layer_types(hf)
    settings = {LOCAL: {"sliding_window": window}, GLOBAL: {"position": "none"}}
    bias = bool(hf.get("attention_bias", False))
    return Config(
        **llama_like_from_hf(hf),
        d_head=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        position_params={**rope_params(hf), "layout": "interleaved"},
        layer_types=types,
        layer_settings={label: settings[label] for label in dict.fromkeys(types)},
        max_positions=hf.get("max_position_embeddings", 8192),
        norm="layernorm",
        norm_bias=False,
        norm_eps=hf.get("layer_norm_eps", 1e-5),
        norm_placement="pre",
        parallel_residual=True,
        activation=GATED[activation],
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=False,
        logit_scale=float(hf.get("logit_scale", 0.0625)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        pad_token_id=hf.get("pad_token_id", 0),
        bos_token_id=hf.get("bos_token_id", 5),
        eos_token_id=first_token_id(hf.get("eos_token_id", 255001)),
        hf_model_type=MODEL_TYPE,
    )


def _layers_to_hf(cfg: Config) -> dict:
    """`layer_types` and `sliding_window`: local layers slide one window and keep the config's RoPE, global ones
    have neither."""

    def kind(layer: Config) -> str | None:
        if layer.position == "none" and layer.sliding_window is None:
            return GLOBAL
        own_rope = layer.position == "rope" and layer.position_params == cfg.position_params
        return LOCAL if own_rope and layer.sliding_window else None

    expected = "local ones (the config's RoPE and a sliding window) and global ones (no position encoding, no window)"
    return layers_to_hf(cfg, MODEL_TYPE, kind, expected, DEFAULT_WINDOW)


def config_to_hf(cfg: Config) -> dict:
    if (
        cfg.position != "rope"
        or cfg.position_params.get("layout") != "interleaved"
        or cfg.norm != "layernorm"
        or cfg.norm_bias
        or not cfg.parallel_residual
        or cfg.qk_norm
        or cfg.activation not in HIDDEN_ACT
    ):
        raise unsupported(
            MODEL_TYPE,
            "a layout other than interleaved RoPE + parallel blocks with LayerNorm without bias + gated FFN, "
            "without QK-norm (to_hf)",
        )
    if cfg.qkv_bias != cfg.attn_out_bias or cfg.ffn_bias:
        raise unsupported(MODEL_TYPE, "attention biases on some projections only, or FFN biases (to_hf)")
    require_default_scale(cfg, MODEL_TYPE)
    require_decoder_layout(cfg, MODEL_TYPE, norm="layernorm", parallel_residual=True)
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "Cohere2"),
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "layer_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        "logit_scale": cfg.logit_scale,
        **rope_to_hf(cfg),
        **_layers_to_hf(cfg),
    }


def _shared_norm(ours: str, theirs: str) -> list[Rule]:
    """The one `input_layernorm`, read by both norms of posformer's parallel block."""
    return [
        *norm(f"{ours}.attn_res.norm", f"{theirs}.input_layernorm", bias=False),
        *norm(f"{ours}.ffn_res.norm", f"{theirs}.input_layernorm", bias=False),
    ]


def rules(cfg: Config) -> list[Rule]:
    return decoder_rules(cfg, separate_projections(cfg), _shared_norm)


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """Refuse a layer whose two norms differ (training moved them apart): Cohere2 has one."""
    for i, block in enumerate(model.decoder.layers):
        if not torch.equal(block.attn_res.norm.weight, block.ffn_res.norm.weight):
            raise unsupported(
                MODEL_TYPE, f"layer {i}: different norms before attention and the FFN (one input_layernorm) (to_hf)"
            )


FAMILY = register(
    Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, finish_export=finish_export, logit_scale=True)
)
