"""DeepSeek-V3 (model_type "deepseek_v3"), dense models only: multi-head latent attention and SwiGLU everywhere.

Attention is MLA (`Config.latent_attention`, `posformer.modules.latent_attention`): `q_proj`, or `q_a_proj` ->
`q_a_layernorm` -> `q_b_proj` with `q_lora_rank`; `kv_a_proj_with_mqa` -> (latent of `kv_lora_rank`, one shared
rope key of `qk_rope_head_dim`), `kv_a_layernorm` -> `kv_b_proj` -> each head's (`qk_nope_head_dim`,
`v_head_dim`); `o_proj`. posformer's `d_head` is `qk_rope_head_dim`. RoPE rotates the rope parts, pairs
(2i, 2i + 1) (layout "interleaved") with `rope_interleave` (the default), else (i, i + r/2) ("half"), with
`rope_theta` and any `rope_scaling`. The softmax scale is `qk_head_dim` ** -0.5, times mscale(factor,
mscale_all_dim) ** 2 (YaRN's 0.1 * mscale_all_dim * ln(factor) + 1) when `rope_scaling` has a non-zero
`mscale_all_dim`, as transformers 4.57.6 computes it: `Config.attn_scale` (transformers 5 reads both from
`rope_parameters`, where a `rope_type` of "default" leaves the scale alone). Pre-RMSNorm, `attention_bias` on
q_a_proj / kv_a_proj_with_mqa / o_proj. The feed-forward is dense (SwiGLU of `intermediate_size`) in every layer:
`first_k_dense_replace` >= `num_hidden_layers`; a model with mixture-of-experts layers is refused by name, as are
`num_key_value_heads` other than `num_attention_heads` (which transformers cannot run either). Heads:
DeepseekV3ForCausalLM (causal_lm), DeepseekV3Model (none).
"""

from __future__ import annotations

import math

from posformer.config import Config
from posformer.hf.decoder_fields import causal_lm_fields
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layout import require_decoder_layout
from posformer.hf.llama import GATED, HIDDEN_ACT, decoder_rules, ignore, llama_like_to_hf
from posformer.hf.mapping import Rule, fused_linear, linear, norm
from posformer.hf.rope import rope_params, rope_to_hf, scaling_dict

MODEL_TYPE = "deepseek_v3"


def _yarn_mscale(factor: float, mscale: float) -> float:
    """transformers' `yarn_get_mscale`: 0.1 * mscale * ln(factor) + 1, 1 for factor <= 1."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def softmax_scale(qk_head_dim: int, scaling: dict | None) -> float:
    """`DeepseekV3Attention.scaling`: qk_head_dim ** -0.5, times mscale(factor, mscale_all_dim) ** 2 when the
    RoPE scaling has a non-zero `mscale_all_dim`."""
    scale = qk_head_dim**-0.5
    mscale_all_dim = (scaling or {}).get("mscale_all_dim") or 0
    if mscale_all_dim:
        scale *= _yarn_mscale(float(scaling["factor"]), float(mscale_all_dim)) ** 2
    return scale


def _mscale_scaling(hf: dict) -> dict | None:
    """The RoPE scaling whose `mscale_all_dim` scales the softmax: v4's `rope_scaling` (any, as transformers 4.57.6
    reads it), or v5's `rope_parameters` unless its `rope_type` is "default" (as transformers 5 reads it)."""
    scaling, _, v5 = scaling_dict(hf)
    if v5 and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        return None
    return scaling


def _check_features(hf: dict) -> None:
    n, heads = hf["num_hidden_layers"], hf["num_attention_heads"]
    dense = hf.get("first_k_dense_replace", 3)
    if dense < n:
        raise unsupported(
            MODEL_TYPE,
            f"first_k_dense_replace={dense} < num_hidden_layers={n}: mixture-of-experts layers (from layer {dense} "
            "on); only dense DeepSeek-V3 models are mapped",
        )
    if hf.get("num_key_value_heads") not in (None, heads):
        raise unsupported(
            MODEL_TYPE, f"num_key_value_heads={hf['num_key_value_heads']} other than num_attention_heads={heads}"
        )
    if hf.get("pretraining_tp", 1) not in (1, None):
        raise unsupported(MODEL_TYPE, f"tensor-parallel slicing pretraining_tp={hf['pretraining_tp']}")
    if hf.get("hidden_act", "silu") not in GATED:
        raise unsupported(MODEL_TYPE, f"hidden_act={hf['hidden_act']!r} (supported: {', '.join(GATED)})")


def config_from_hf(hf: dict) -> Config:
    _check_features(hf)
    nope, rope = hf.get("qk_nope_head_dim", 128), hf.get("qk_rope_head_dim", 64)
    scale = softmax_scale(nope + rope, _mscale_scaling(hf))
    bias = bool(hf.get("attention_bias", False))
    layout = "interleaved" if hf.get("rope_interleave", True) else "half"
    return Config(
        arch="decoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        d_head=rope,
        latent_attention={
            "q_lora_rank": hf.get("q_lora_rank", 1536),
            "kv_lora_rank": hf.get("kv_lora_rank", 512),
            "nope_dim": nope,
            "v_dim": hf.get("v_head_dim", 128),
        },
        d_ff=hf["intermediate_size"],
        position="rope",
        position_params={**rope_params(hf), "layout": layout},
        max_positions=hf.get("max_position_embeddings", 4096),
        attn_scale=None if scale == (nope + rope) ** -0.5 else scale,
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        norm_placement="pre",
        activation=GATED[hf.get("hidden_act", "silu")],
        attention_dropout=hf.get("attention_dropout", 0.0),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=False,
        **causal_lm_fields(hf, MODEL_TYPE, bos_token_id=0, eos_token_id=1),
    )


def config_to_hf(cfg: Config) -> dict:
    require_decoder_layout(
        cfg, MODEL_TYPE, ffn_bias=False, attn_out_bias=cfg.qkv_bias, sliding_window=None, layer_types=None
    )
    latent = cfg.latent_attention
    if latent is None:
        raise unsupported(MODEL_TYPE, "Config.latent_attention=None (its attention is multi-head latent attention)")
    if cfg.activation not in HIDDEN_ACT:
        raise unsupported(MODEL_TYPE, f"activation={cfg.activation!r} (a gated FFN: {', '.join(HIDDEN_ACT)}) (to_hf)")
    rope = rope_to_hf(cfg)
    expected = softmax_scale(latent["nope_dim"] + cfg.head_dim, rope["rope_scaling"])
    if abs(cfg.scale - expected) > 1e-12 * expected:
        raise unsupported(
            MODEL_TYPE,
            f"Config.attn_scale={cfg.attn_scale} (the scale is {cfg.scale}; transformers computes {expected} from "
            "qk_head_dim and the RoPE scaling's mscale_all_dim) (to_hf)",
        )
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "DeepseekV3"),
        "first_k_dense_replace": cfg.n_layers,
        "num_key_value_heads": cfg.n_heads,
        "q_lora_rank": latent["q_lora_rank"],
        "kv_lora_rank": latent["kv_lora_rank"],
        "qk_rope_head_dim": cfg.head_dim,
        "qk_nope_head_dim": latent["nope_dim"],
        "v_head_dim": latent["v_dim"],
        "rope_interleave": cfg.position_params["layout"] == "interleaved",
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        **rope,
    }


def rules(cfg: Config) -> list[Rule]:
    """Each MLA projection and latent norm under its own name; gate/up fused into posformer's one `ffn.up`."""
    latent = cfg.latent_attention

    def projections(ours: str, theirs: str) -> list[Rule]:
        attn, mlp, bias = f"{theirs}.self_attn", f"{theirs}.mlp", cfg.qkv_bias
        if latent["q_lora_rank"] is None:
            out = linear(f"{ours}.attn.q", f"{attn}.q_proj", bias=False)
        else:
            out = linear(f"{ours}.attn.q_down", f"{attn}.q_a_proj", bias)
            out += norm(f"{ours}.attn.q_norm", f"{attn}.q_a_layernorm", bias=False)
            out += linear(f"{ours}.attn.q_up", f"{attn}.q_b_proj", bias=False)
        out += linear(f"{ours}.attn.kv_down", f"{attn}.kv_a_proj_with_mqa", bias)
        out += norm(f"{ours}.attn.kv_norm", f"{attn}.kv_a_layernorm", bias=False)
        out += linear(f"{ours}.attn.kv_up", f"{attn}.kv_b_proj", bias=False)
        return out + fused_linear(
            f"{ours}.ffn.up", (f"{mlp}.gate_proj", f"{mlp}.up_proj"), (cfg.ff_dim, cfg.ff_dim), False
        )

    return decoder_rules(cfg, projections)


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, latent_attention=True))
