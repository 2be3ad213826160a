"""Mixtral: Mistral's layers with a mixture-of-experts feed-forward in every layer, and the parts Qwen3-MoE shares.

Pre-RMSNorm, RoPE (half layout, `rope_theta` 1e6 by default), GQA without biases, an optional sliding window on
every layer (`Config.sliding_window`). Each layer's `block_sparse_moe` is posformer's `MoEFeedForward`: `gate`
(the router, no bias) scores `num_local_experts` experts, each token goes to `num_experts_per_tok`, weighted by
the softmax renormalised over its experts (`Config.norm_topk_prob=True`); expert e's `w1` (gate), `w3` (value)
and `w2` (down), SwiGLU of `intermediate_size` units, are rows of the batched `experts.up` ([w1; w3]) and
`experts.down`. `router_aux_loss_coef` is `Config.router_aux_loss_coef`; `router_jitter_noise` (a training-time
noise on the router's input) is refused. Heads: MixtralForCausalLM (causal_lm), MixtralModel (none).
transformers 5 saves these per-expert tensors too; its in-memory layout (`mlp.gate`, `mlp.experts.gate_up_proj`,
`mlp.experts.down_proj`) is read as well (`fused_experts`).

The mixture-of-experts families share this module's weight rules: the decoder (`decoder_layer_rules`,
`moe_decoder_rules`), q/k/v (`attention_rules`), a router and its per-expert projections (`routed_experts_rules`,
`experts_rule`), fused experts stored (in, out) (`transposed_experts`) and a dense SwiGLU (`dense_ffn_rules`: dense
layers and shared experts); and Mixtral's and Qwen3-MoE's config fields (`common_fields`, `common_to_hf`).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from posformer.config import Config
from posformer.hf.decoder_fields import gated_decoder_fields
from posformer.hf.family import Family, register, unsupported
from posformer.hf.fused_experts import split_fused_experts
from posformer.hf.layout import require_decoder_layout, require_default_scale
from posformer.hf.llama import HIDDEN_ACT, ignore, layer_norms, llama_like_to_hf
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same
from posformer.hf.rope import rope_params, rope_to_hf

MODEL_TYPE = "mixtral"
EXPERT_NAMES = ("gate_proj", "up_proj", "down_proj")  # an expert's projections, as most families name them


def experts_rule(ours: str, gates: list[str], ups: list[str], downs: list[str], d_ff: int) -> list[Rule]:
    """`ours.up` (n_experts, 2 d_ff, d_model) <- each expert's gate and up (value) projections (d_ff, d_model),
    stacked; `ours.down` (n_experts, d_model, d_ff) <- each expert's down projection; HF names in expert order."""
    pairs = tuple(name for pair in zip(gates, ups, strict=True) for name in pair)

    def up_to_ours(ts: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([torch.cat(ts[i : i + 2]) for i in range(0, len(ts), 2)])

    def up_to_theirs(t: torch.Tensor) -> list[torch.Tensor]:
        return [half for expert in t for half in expert.split(d_ff)]

    return [
        Rule(f"{ours}.up", pairs, up_to_ours, up_to_theirs),
        Rule(f"{ours}.down", tuple(downs), torch.stack, lambda t: list(t.unbind(0))),
    ]


def routed_experts_rules(cfg: Config, ours: str, moe: str, names: tuple[str, str, str] = EXPERT_NAMES) -> list[Rule]:
    """An expert layer's router `{moe}.gate` (no bias) -> `{ours}.router`, and its experts' per-expert projections
    `{moe}.experts.{e}.{name}.weight`, `names` = (gate, up, down) -> `{ours}.experts` (`experts_rule`)."""
    experts = [[f"{moe}.experts.{e}.{name}.weight" for e in range(cfg.n_experts)] for name in names]
    return [same(f"{ours}.router.weight", f"{moe}.gate.weight")] + experts_rule(
        f"{ours}.experts", *experts, cfg.expert_ff_dim
    )


def transposed_experts(ours: str, theirs: str) -> Rule:
    """posformer's batched expert weights (n_experts, out, in) <- fused experts stored (n_experts, in, out)."""
    return Rule(ours, (theirs,), lambda ts: ts[0].transpose(1, 2), lambda t: [t.transpose(1, 2)])


def dense_ffn_rules(ours: str, theirs: str, d_ff: int) -> list[Rule]:
    """A SwiGLU `theirs` (gate_proj, up_proj, down_proj; no biases) -> posformer's `FeedForward` `ours` (gate and up
    fused in `up`): a dense layer, or a shared expert."""
    up = fused_linear(f"{ours}.up", (f"{theirs}.gate_proj", f"{theirs}.up_proj"), (d_ff, d_ff), False)
    return up + linear(f"{ours}.down", f"{theirs}.down_proj", bias=False)


def decoder_layer_rules(cfg: Config, layer: Callable[[str, str, int], list[Rule]]) -> list[Rule]:
    """The weight rules of a pre-norm decoder under LLaMA's names: the embedding, each layer's two norms and
    `layer(ours, theirs, i)` (its mixer and feed-forward, the family's own), the final norm and an untied LM head."""
    base = "model." if cfg.head_kind == "causal_lm" else ""
    out = [same("embed_tokens.weight", f"{base}embed_tokens.weight")]
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"{base}layers.{i}"
        out += layer_norms(ours, theirs) + layer(ours, theirs, i)
    out += norm("decoder.norm", f"{base}norm", bias=False)
    if cfg.head_kind == "causal_lm" and not cfg.tie_embeddings:
        out.append(same("head.proj.weight", "lm_head.weight"))
    return out


def moe_decoder_rules(
    cfg: Config, attention: Callable[[str, str], list[Rule]], ffn: Callable[[str, str, int], list[Rule]]
) -> list[Rule]:
    """`decoder_layer_rules` of a decoder whose layers all attend: `attention(ours, theirs)` gives one layer's
    q/k/v/o (with any QK-norm), `ffn(ours, theirs, layer)` its feed-forward (experts or dense)."""
    return decoder_layer_rules(cfg, lambda ours, theirs, i: attention(ours, theirs) + ffn(ours, theirs, i))


def attention_rules(cfg: Config) -> Callable[[str, str], list[Rule]]:
    """One layer's separate q/k/v projections fused into posformer's one, o_proj, and any per-head QK-norm."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim

    def attention(ours: str, theirs: str) -> list[Rule]:
        attn = f"{theirs}.self_attn"
        out = fused_linear(
            f"{ours}.attn.qkv", (f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"), (q, kv, kv), cfg.qkv_bias
        )
        if cfg.qk_norm:
            out += norm(f"{ours}.attn.q_norm", f"{attn}.q_norm", bias=False)
            out += norm(f"{ours}.attn.k_norm", f"{attn}.k_norm", bias=False)
        return out + linear(f"{ours}.attn.out", f"{attn}.o_proj", cfg.attn_out_bias)

    return attention


def common_fields(
    hf: dict, model_type: str, *, norm_eps: float, bos_token_id: int | None = None, eos_token_id: int | None = None
) -> dict:
    """The `Config` fields Mixtral and Qwen3-MoE read alike: `gated_decoder_fields` (with the family's defaults)
    and the load-balancing loss's weight, `router_aux_loss_coef`."""
    return {
        **gated_decoder_fields(hf, model_type, norm_eps=norm_eps, bos_token_id=bos_token_id, eos_token_id=eos_token_id),
        "router_aux_loss_coef": float(hf.get("router_aux_loss_coef", 0.001)),
    }


def config_from_hf(hf: dict) -> Config:
    if hf.get("router_jitter_noise"):
        raise unsupported(MODEL_TYPE, f"router_jitter_noise={hf['router_jitter_noise']} (noise on the router's input)")
    return Config(
        **common_fields(hf, MODEL_TYPE, norm_eps=1e-5, bos_token_id=1, eos_token_id=2),
        d_ff=hf["intermediate_size"],
        n_experts=hf.get("num_local_experts", 8),
        experts_per_token=hf.get("num_experts_per_tok", 2),
        position="rope",
        position_params=rope_params(hf, default_theta=1e6),
        max_positions=hf.get("max_position_embeddings", 4096 * 32),
        qkv_bias=False,
        attn_out_bias=False,
        sliding_window=hf.get("sliding_window"),
    )


def common_to_hf(cfg: Config, model_type: str, name: str, **expected) -> dict:
    """The HF fields Mixtral and Qwen3-MoE write alike (`name`: the architectures' prefix), after refusing by name
    what neither can express (and the family's own `expected` field values)."""
    require_decoder_layout(
        cfg,
        model_type,
        ffn_bias=False,
        query_temperature=None,
        layer_types=None,
        router_bias=False,
        router_softmax="all",
        expert_activation=None,
        shared_expert_d_ff=None,
        **expected,
    )
    if cfg.activation not in HIDDEN_ACT or cfg.position_params.get("layout") != "half":
        raise unsupported(model_type, "experts other than gated ones, or RoPE's interleaved layout (to_hf)")
    require_default_scale(cfg, model_type)
    return {
        **llama_like_to_hf(cfg, model_type, name),
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        "num_experts_per_tok": cfg.experts_per_token,
        "router_aux_loss_coef": cfg.router_aux_loss_coef,
        **rope_to_hf(cfg),
    }


def config_to_hf(cfg: Config) -> dict:
    out = common_to_hf(
        cfg,
        MODEL_TYPE,
        "Mixtral",
        qk_norm=False,
        qkv_bias=False,
        attn_out_bias=False,
        norm_topk_prob=True,
        moe_layers=None,
    )
    return {
        **out,
        "intermediate_size": cfg.expert_ff_dim,
        "num_local_experts": cfg.n_experts,
        "sliding_window": cfg.sliding_window,
    }


def rules(cfg: Config) -> list[Rule]:
    """q/k/v fused; each layer's router `block_sparse_moe.gate` and its experts' w1/w3 (up) and w2 (down)."""

    def ffn(ours: str, theirs: str, layer: int) -> list[Rule]:
        return routed_experts_rules(cfg, f"{ours}.ffn", f"{theirs}.block_sparse_moe", ("w1", "w3", "w2"))

    return moe_decoder_rules(cfg, attention_rules(cfg), ffn)


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """transformers 5's fused expert tensors split into the per-expert ones `rules` read."""
    return split_fused_experts(state, "block_sparse_moe", ("w1", "w3", "w2"))


FAMILY = register(
    Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, prepare_state=prepare_state, experts=True)
)
