"""GPT-OSS: alternating sliding and full attention with learned sinks, and a mixture of experts in every layer.

Pre-RMSNorm, RoPE (half layout, `rope_theta` 150000; YaRN by default: a config without `rope_scaling` gets
transformers 4.57.6's default, factor 32 over 4096 positions, beta_fast 32, beta_slow 1, `truncate` False),
GQA with biases on q/k/v/o (`attention_bias`, True by default), `head_dim` from the config. Each layer is
"sliding_attention" (a window of `sliding_window` tokens) or "full_attention", as `layer_types` lists them (by
default alternating, sliding first): posformer's `Config.layer_types`. Each layer's attention has one learned
sink logit per head (`self_attn.sinks`, `Config.attention_sinks`). Each layer's `mlp` is posformer's
`MoEFeedForward`: `router` (with a bias, `Config.router_bias`) scores `num_local_experts` experts, each token
goes to `num_experts_per_tok`, weighted by the softmax over their logits alone (`Config.router_softmax="top_k"`);
the experts, of `intermediate_size` units with biases (`Config.ffn_bias`), are GPT-OSS's clamped SwiGLU
(`Config.expert_activation="swiglu_clamped"`, alpha 1.702, limit 7; `hidden_act` is not read by transformers'
GPT-OSS, nor is `swiglu_limit`, whose value other than 7 is refused). `experts.gate_up_proj` (n_experts,
hidden, 2 d_ff) holds the gate and up columns interleaved (gate at even columns), and its bias alike;
`down_proj` is (n_experts, d_ff, hidden): both transposed against posformer's `experts.up` / `experts.down`.
`router_aux_loss_coef` is `Config.router_aux_loss_coef` (`output_router_logits` is not read: posformer always
returns the load-balancing loss, over the softmax of the router logits, as transformers 5 does; 4.57.6 took it
over its routing scores). Embeddings untied by default.
Heads: GptOssForCausalLM (causal_lm), GptOssModel (none).
"""

from __future__ import annotations

import torch

from posformer.config import Config
from posformer.hf.decoder_fields import causal_lm_fields
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layer_kinds import GLOBAL, LOCAL, layer_types_from_hf, layers_to_hf
from posformer.hf.layout import require_decoder_layout, require_default_scale
from posformer.hf.llama import ignore, llama_like_to_hf
from posformer.hf.mapping import Rule, same
from posformer.hf.mixtral import attention_rules, moe_decoder_rules, transposed_experts
from posformer.hf.rope import rope_params, rope_to_hf
from posformer.modules.moe import SWIGLU_LIMIT

MODEL_TYPE = "gpt_oss"
DEFAULT_ROPE_SCALING = {
    "rope_type": "yarn",
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
}


def _layer_types(hf: dict) -> list[str]:
    """`layer_types`, or transformers 4.57.6's default: sliding, full, sliding, ..."""
    return layer_types_from_hf(hf, MODEL_TYPE, 2, hf.get("num_hidden_layers", 36))


def config_from_hf(hf: dict) -> Config:
    limit = hf.get("swiglu_limit", SWIGLU_LIMIT)
    if limit != SWIGLU_LIMIT:
        raise unsupported(MODEL_TYPE, f"swiglu_limit={limit} (transformers 4.57.6 clamps at {SWIGLU_LIMIT})")
    types = _layer_types(hf)
    window = hf.get("sliding_window", 128)
    if LOCAL in types and window is None:
        raise unsupported(MODEL_TYPE, f"sliding_window=None with {LOCAL!r} layers")
    if "rope_scaling" not in hf and "rope_parameters" not in hf:
        hf = {**hf, "rope_scaling": dict(DEFAULT_ROPE_SCALING)}
    heads, head_dim = hf.get("num_attention_heads", 64), hf.get("head_dim", 64)  # None: hidden_size // heads
    bias = bool(hf.get("attention_bias", True))
    return Config(
        arch="decoder",
        vocab_size=hf.get("vocab_size", 201088),
        d_model=hf.get("hidden_size", 2880),
        n_layers=len(types),
        n_heads=heads,
        n_kv_heads=hf.get("num_key_value_heads") or heads,
        d_head=head_dim if head_dim is not None else hf.get("hidden_size", 2880) // heads,
        d_ff=hf.get("intermediate_size", 2880),
        n_experts=hf.get("num_local_experts", 128),
        experts_per_token=hf.get("num_experts_per_tok", 4),
        router_bias=True,
        router_softmax="top_k",
        expert_activation="swiglu_clamped",
        router_aux_loss_coef=float(hf.get("router_aux_loss_coef", 0.9)),
        position="rope",
        position_params=rope_params(hf, default_theta=150000.0),
        layer_types=types,
        layer_settings={LOCAL: {"sliding_window": window}} if LOCAL in types else {},
        max_positions=hf.get("max_position_embeddings", 131072),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-5),
        norm_placement="pre",
        activation="swiglu",
        attention_dropout=hf.get("attention_dropout", 0.0),
        attention_sinks=True,
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=True,
        **causal_lm_fields(hf, MODEL_TYPE),
    )


def _layers_to_hf(cfg: Config) -> dict:
    """`layer_types` and `sliding_window`: sliding layers one window, full ones none, all the config's RoPE."""

    def kind(layer: Config) -> str | None:
        if layer.position != "rope" or layer.position_params != cfg.position_params:
            return None
        return GLOBAL if layer.sliding_window is None else LOCAL

    return layers_to_hf(cfg, MODEL_TYPE, kind, "layers with the config's own RoPE, sliding or not", 128)


def config_to_hf(cfg: Config) -> dict:
    require_decoder_layout(
        cfg,
        MODEL_TYPE,
        query_temperature=None,
        qk_norm=False,
        attn_out_bias=cfg.qkv_bias,
        attention_sinks=True,
        ffn_bias=True,
        router_bias=True,
        router_softmax="top_k",
        expert_activation="swiglu_clamped",
        moe_layers=None,
        shared_expert_d_ff=None,
    )
    if cfg.position_params.get("layout") != "half":
        raise unsupported(MODEL_TYPE, "RoPE's interleaved layout (to_hf)")
    require_default_scale(cfg, MODEL_TYPE)
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "GptOss"),
        "intermediate_size": cfg.expert_ff_dim,
        "head_dim": cfg.head_dim,
        "num_local_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.experts_per_token,
        "router_aux_loss_coef": cfg.router_aux_loss_coef,
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        **rope_to_hf(cfg),
        **_layers_to_hf(cfg),
    }


def _interleaved(ours: str, theirs: str, d_ff: int, transpose: bool) -> Rule:
    """`ours` (n_experts, 2 d_ff[, d_model]), gate rows then up rows <- `theirs` (n_experts[, d_model], 2 d_ff),
    gate and up columns interleaved (transposed against ours when `transpose`)."""

    def to_ours(ts: list[torch.Tensor]) -> torch.Tensor:
        t = ts[0]
        t = torch.cat([t[..., ::2], t[..., 1::2]], dim=-1)
        return t.transpose(1, 2) if transpose else t

    def to_theirs(t: torch.Tensor) -> list[torch.Tensor]:
        t = t.transpose(1, 2) if transpose else t
        gate, up = t.split(d_ff, dim=-1)
        return [torch.stack([gate, up], dim=-1).flatten(-2)]

    return Rule(ours, (theirs,), to_ours, to_theirs)


def rules(cfg: Config) -> list[Rule]:
    """q/k/v fused (with biases), the sinks; each layer's router (weight and bias) and its experts' interleaved
    gate_up_proj (and bias), down_proj (and bias)."""
    qkv_and_out = attention_rules(cfg)

    def attention(ours: str, theirs: str) -> list[Rule]:
        return qkv_and_out(ours, theirs) + [same(f"{ours}.attn.sinks", f"{theirs}.self_attn.sinks")]

    def ffn(ours: str, theirs: str, layer: int) -> list[Rule]:
        mlp, d_ff = f"{theirs}.mlp", cfg.expert_ff_dim
        return [
            same(f"{ours}.ffn.router.weight", f"{mlp}.router.weight"),
            same(f"{ours}.ffn.router.bias", f"{mlp}.router.bias"),
            _interleaved(f"{ours}.ffn.experts.up", f"{mlp}.experts.gate_up_proj", d_ff, transpose=True),
            _interleaved(f"{ours}.ffn.experts.up_bias", f"{mlp}.experts.gate_up_proj_bias", d_ff, transpose=False),
            transposed_experts(f"{ours}.ffn.experts.down", f"{mlp}.experts.down_proj"),
            same(f"{ours}.ffn.experts.down_bias", f"{mlp}.experts.down_proj_bias"),
        ]

    return moe_decoder_rules(cfg, attention, ffn)


FAMILY = register(
    Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, experts=True, attention_sinks=True)
)
