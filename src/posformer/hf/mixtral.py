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
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from posformer.config import Config
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.fused_experts import split_fused_experts
from posformer.hf.layout import require_fields, require_head
from posformer.hf.llama import GATED, HIDDEN_ACT, first_token_id, ignore, layer_norms, llama_like_to_hf
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same
from posformer.hf.rope import rope_params, rope_to_hf

MODEL_TYPE = "mixtral"
HEADS = {"ForCausalLM": "causal_lm", "Model": "none"}


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


def moe_decoder_rules(
    cfg: Config, attention: Callable[[str, str], list[Rule]], ffn: Callable[[str, str, int], list[Rule]]
) -> list[Rule]:
    """The weight rules of a LLaMA-layout decoder whose feed-forward is its family's own: `attention(ours, theirs)`
    gives one layer's q/k/v/o (with any QK-norm), `ffn(ours, theirs, layer)` its feed-forward (experts or dense)."""
    base = "model." if cfg.head_kind == "causal_lm" else ""
    out = [same("embed_tokens.weight", f"{base}embed_tokens.weight")]
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"{base}layers.{i}"
        out += layer_norms(ours, theirs) + attention(ours, theirs) + ffn(ours, theirs, i)
    out += norm("decoder.norm", f"{base}norm", bias=False)
    if cfg.head_kind == "causal_lm" and not cfg.tie_embeddings:
        out.append(same("head.proj.weight", "lm_head.weight"))
    return out


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


def common_fields(hf: dict, model_type: str) -> dict:
    """The `Config` fields Mixtral and Qwen3-MoE read alike: sizes, RoPE, norms, activation, head, token ids."""
    activation = hf.get("hidden_act", "silu")
    if activation not in GATED:
        raise unsupported(model_type, f"hidden_act={activation!r} (supported: {', '.join(GATED)})")
    return dict(
        arch="decoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        d_head=hf.get("head_dim"),
        norm="rmsnorm",
        norm_placement="pre",
        activation=GATED[activation],
        attention_dropout=hf.get("attention_dropout", 0.0),
        ffn_bias=False,
        router_aux_loss_coef=float(hf.get("router_aux_loss_coef", 0.001)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        head=architecture(hf, HEADS, "causal_lm"),
        pad_token_id=hf.get("pad_token_id"),
        eos_token_id=first_token_id(hf.get("eos_token_id")),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=model_type,
    )


def config_from_hf(hf: dict) -> Config:
    if hf.get("router_jitter_noise"):
        raise unsupported(MODEL_TYPE, f"router_jitter_noise={hf['router_jitter_noise']} (noise on the router's input)")
    fields = common_fields(hf, MODEL_TYPE)
    fields.update(
        eos_token_id=first_token_id(hf.get("eos_token_id", 2)),
        bos_token_id=hf.get("bos_token_id", 1),
        norm_eps=hf.get("rms_norm_eps", 1e-5),
    )
    return Config(
        **fields,
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
    require_head(cfg, model_type)
    require_fields(
        cfg,
        model_type,
        arch="decoder",
        position="rope",
        norm="rmsnorm",
        norm_placement="pre",
        use_final_norm=True,
        embed_norm=False,
        parallel_residual=False,
        ffn_bias=False,
        scale_embeddings=False,
        type_vocab_size=0,
        head_bias=False,
        head_transform=False,
        scale_tied_head=False,
        query_temperature=None,
        layer_types=None,
        **expected,
    )
    if cfg.activation not in HIDDEN_ACT or cfg.position_params.get("layout") != "half":
        raise unsupported(model_type, "experts other than gated ones, or RoPE's interleaved layout (to_hf)")
    if abs(cfg.scale - cfg.head_dim**-0.5) > 1e-12:
        raise unsupported(model_type, f"an attention scale other than head_dim ** -0.5: {cfg.scale} (to_hf)")
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
        moe, n = f"{theirs}.block_sparse_moe", range(cfg.n_experts)
        names = [[f"{moe}.experts.{e}.{w}.weight" for e in n] for w in ("w1", "w3", "w2")]
        return [same(f"{ours}.ffn.router.weight", f"{moe}.gate.weight")] + experts_rule(
            f"{ours}.ffn.experts", *names, cfg.expert_ff_dim
        )

    return moe_decoder_rules(cfg, attention_rules(cfg), ffn)


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """transformers 5's fused expert tensors split into the per-expert ones `rules` read."""
    return split_fused_experts(state, "block_sparse_moe", ("w1", "w3", "w2"))


FAMILY = register(
    Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, prepare_state=prepare_state, experts=True)
)
