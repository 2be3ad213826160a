"""Phi-3 (and Phi-4-mini, which shares its model_type): LLaMA's layout with fused projections and LongRoPE.

Pre-RMSNorm, SwiGLU, GQA, no biases. The q/k/v projection is one `qkv_proj` (q rows, then k, then v) and the
gate and up projections one `gate_up_proj` (gate rows, then up): both are posformer's own fused layouts, so
they copy as they are. RoPE may rotate a `partial_rotary_factor` of each head and may be scaled with
"longrope" (short and long factors switching past `original_max_position_embeddings`, read from the top of
the config); a `sliding_window` slides every layer. Heads: Phi3ForCausalLM (causal_lm), Phi3Model (none).
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layout import require_decoder_layout, require_default_scale
from posformer.hf.llama import decoder_rules, ignore, llama_like_from_hf, llama_like_to_hf
from posformer.hf.mapping import Rule, same
from posformer.hf.rope import rope_params, rope_to_hf


def config_from_hf(hf: dict) -> Config:
    if hf.get("hidden_act", "silu") != "silu":
        raise unsupported("phi3", f"hidden_act={hf['hidden_act']!r} (supported: silu)")
    return Config(
        **llama_like_from_hf(hf),
        position_params=rope_params(hf),
        max_positions=hf.get("max_position_embeddings", 4096),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-5),
        norm_placement="pre",
        activation="swiglu",
        dropout=hf.get("resid_pdrop", 0.0),
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        sliding_window=hf.get("sliding_window"),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        pad_token_id=hf.get("pad_token_id"),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=hf.get("eos_token_id"),
        hf_model_type="phi3",
    )


def config_to_hf(cfg: Config) -> dict:
    if (
        cfg.position != "rope"
        or cfg.norm != "rmsnorm"
        or cfg.norm_placement != "pre"
        or cfg.activation != "swiglu"
        or cfg.qk_norm
    ):
        raise unsupported("phi3", "a layout other than RoPE + pre-RMSNorm + SwiGLU without QK-norm (to_hf)")
    if cfg.qkv_bias or cfg.attn_out_bias or cfg.ffn_bias or cfg.d_head not in (None, cfg.d_model // cfg.n_heads):
        raise unsupported("phi3", "biases or a head size other than d_model / n_heads (to_hf)")
    require_decoder_layout(cfg, "phi3", layer_types=None)  # one kind of layer: its sliding_window slides every one
    require_default_scale(cfg, "phi3")
    params = cfg.position_params
    if params.get("layout") != "half" or (params.get("scaling") or {}).get("attention_factor") is not None:
        raise unsupported("phi3", "RoPE's interleaved layout or a longrope attention_factor (to_hf)")
    rope = rope_to_hf(cfg, partial=True)
    return {
        **llama_like_to_hf(cfg, "phi3", "Phi3"),
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "partial_rotary_factor": float(params.get("rotary_fraction", 1.0)),
        "sliding_window": cfg.sliding_window,
        "original_max_position_embeddings": cfg.max_positions,
        **rope,
    }


def rules(cfg: Config) -> list[Rule]:
    """LLaMA's layout with `qkv_proj` and `gate_up_proj` already fused as posformer fuses them."""

    def projections(ours: str, theirs: str) -> list[Rule]:
        return [
            same(f"{ours}.attn.qkv.weight", f"{theirs}.self_attn.qkv_proj.weight"),
            same(f"{ours}.ffn.up.weight", f"{theirs}.mlp.gate_up_proj.weight"),
        ]

    return decoder_rules(cfg, projections)


FAMILY = register(Family(("phi3",), config_from_hf, config_to_hf, rules, ignore))
