"""Qwen3-Next (model_type "qwen3_next", transformers 4.57.6 and 5.x): the hybrid layers of `qwen3_hybrid` (gated
DeltaNet and gated attention) with Qwen3-MoE's mixture of experts plus a gated shared expert.

Layer i has experts unless it is in `mlp_only_layers` or (i + 1) is not a multiple of `decoder_sparse_step`, as
transformers decides (`Config.moe_layers`); the others, and every layer with `num_experts` 0, a dense SwiGLU of
`intermediate_size` (`Config.d_ff`). An expert layer's `mlp`: the router `gate` (no bias) scores `num_experts`
experts of `moe_intermediate_size` units (`Config.expert_d_ff`), each token goes to `num_experts_per_tok`, weighted
by the softmax over all experts renormalised over its own with `norm_topk_prob` (True by default); plus
`shared_expert`, a SwiGLU of `shared_expert_intermediate_size` units every token goes through (`Config.
shared_expert_d_ff`), its output times sigmoid(`shared_expert_gate` x), a scalar per token (`Config.
shared_expert_gate`). `router_aux_loss_coef` is `Config.router_aux_loss_coef`. Heads: Qwen3NextForCausalLM
(causal_lm), Qwen3NextModel (none).

Weights: the linear-attention layers fuse their projections by query/key head (`in_proj_qkvz`, `in_proj_ba`), which
no weight rule can write from posformer's four (`posformer.hf.gated_deltanet`): `prepare_state` splits them into
Qwen3.5's names, which the rules read, and `finish_export` fuses them back. transformers 5 keeps the experts fused in
memory (`mlp.experts.gate_up_proj`, `down_proj`) and saves them per expert; both layouts are read (`fused_experts`).
"""

from __future__ import annotations

import re

from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.fused_experts import split_fused_experts
from posformer.hf.gated_deltanet import fuse_qwen3_next, split_qwen3_next
from posformer.hf.mapping import Rule, WeightMapError, same
from posformer.hf.mixtral import EXPERT_NAMES, dense_ffn_rules, routed_experts_rules
from posformer.hf.qwen3_hybrid import hybrid_fields, hybrid_rules, hybrid_to_hf, ignore, without_mtp
from posformer.utils.validation import is_int

MODEL_TYPE = "qwen3_next"
SPLIT = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")  # our (and Qwen3.5's) projections
_FUSED_QKVZ = re.compile(r"(?P<mixer>.*\.linear_attn)\.in_proj_qkvz\.weight")


def _moe_layers(hf: dict) -> list[bool]:
    """Which layers have experts, as transformers' Qwen3NextDecoderLayer decides."""
    n, step, dense = hf["num_hidden_layers"], hf.get("decoder_sparse_step", 1), hf.get("mlp_only_layers") or []
    if not is_int(step) or step < 1 or not all(is_int(i) for i in dense):
        raise unsupported(
            MODEL_TYPE, f"decoder_sparse_step={step!r}, mlp_only_layers={dense!r} (expected an integer >= 1, indices)"
        )
    experts = hf.get("num_experts", 512)
    return [experts > 0 and i not in dense and (i + 1) % step == 0 for i in range(n)]


def config_from_hf(hf: dict) -> Config:
    layers = _moe_layers(hf)
    fields = hybrid_fields(hf, MODEL_TYPE, d_ff=5632, kv_heads=2)
    if not any(layers):
        return Config(**fields)
    shared = hf.get("shared_expert_intermediate_size", 512)
    if shared == 0:
        raise unsupported(MODEL_TYPE, "shared_expert_intermediate_size=0 (a shared expert without units)")
    return Config(
        **fields,
        n_experts=hf.get("num_experts", 512),
        experts_per_token=hf.get("num_experts_per_tok", 10),
        expert_d_ff=hf.get("moe_intermediate_size", 512),
        norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
        moe_layers=None if all(layers) else layers,
        shared_expert_d_ff=shared,
        shared_expert_gate=True,
        router_aux_loss_coef=float(hf.get("router_aux_loss_coef", 0.001)),
    )


def config_to_hf(cfg: Config) -> dict:
    out = hybrid_to_hf(cfg, MODEL_TYPE, "Qwen3Next")
    if cfg.n_experts is None:
        return {**out, "num_experts": 0, "mlp_only_layers": [], "decoder_sparse_step": 1}
    if cfg.shared_expert_d_ff is None or not cfg.shared_expert_gate:
        raise unsupported(
            MODEL_TYPE,
            f"Config.shared_expert_d_ff={cfg.shared_expert_d_ff}, shared_expert_gate={cfg.shared_expert_gate} "
            "(every expert layer has a gated shared expert) (to_hf)",
        )
    if cfg.router_bias or cfg.router_softmax != "all" or cfg.expert_activation is not None:
        raise unsupported(
            MODEL_TYPE,
            f"Config.router_bias={cfg.router_bias}, router_softmax={cfg.router_softmax!r}, expert_activation="
            f"{cfg.expert_activation!r} (a router without bias, a softmax over all experts, SwiGLU experts) (to_hf)",
        )
    layers = cfg.moe_layers or [True] * cfg.n_layers
    return {
        **out,
        "num_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.experts_per_token,
        "moe_intermediate_size": cfg.expert_ff_dim,
        "shared_expert_intermediate_size": cfg.shared_expert_d_ff,
        "norm_topk_prob": cfg.norm_topk_prob,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [i for i, experts in enumerate(layers) if not experts],
        "router_aux_loss_coef": cfg.router_aux_loss_coef,
    }


def rules(cfg: Config) -> list[Rule]:
    """The hybrid layers' rules; an expert layer's router `mlp.gate`, its experts' gate/up (up) and down
    projections, the shared expert and its gate; a dense layer's gate/up fused into `ffn.up`."""

    def ffn(ours: str, theirs: str, layer: int) -> list[Rule]:
        mlp = f"{theirs}.mlp"
        if not cfg.uses_experts(layer):
            return dense_ffn_rules(f"{ours}.ffn", mlp, cfg.ff_dim)
        return [
            *routed_experts_rules(cfg, f"{ours}.ffn", mlp),
            *dense_ffn_rules(f"{ours}.ffn.shared_expert", f"{mlp}.shared_expert", cfg.shared_expert_d_ff),
            same(f"{ours}.ffn.shared_expert_gate.weight", f"{mlp}.shared_expert_gate.weight"),
        ]

    return hybrid_rules(cfg, ffn)


def _split_projections(cfg: Config, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Each linear-attention layer's fused `in_proj_qkvz` / `in_proj_ba` split into our four projections; a
    tensor of another shape, or a checkpoint holding the four already (Qwen3.5's layout), is a `WeightMapError`."""
    split = sorted(key for key in state if any(key.endswith(f".linear_attn.{name}.weight") for name in SPLIT))
    if split:
        raise WeightMapError(f"{MODEL_TYPE} fuses in_proj_qkvz and in_proj_ba; unknown to it: {', '.join(split)}")
    sizes = cfg.gated_deltanet
    out = dict(state)
    for key in state:
        match = _FUSED_QKVZ.fullmatch(key)
        if match is None or sizes is None:
            continue
        mixer = match["mixer"]
        per_key = sizes["value_heads"] // sizes["key_heads"]
        rows = {
            key: sizes["key_heads"] * (2 * sizes["key_dim"] + 2 * per_key * sizes["value_dim"]),
            f"{mixer}.in_proj_ba.weight": 2 * sizes["value_heads"],
        }
        for name, want in rows.items():
            if name in state and (state[name].dim() != 2 or state[name].shape[0] != want):
                raise WeightMapError(f"{name} {tuple(state[name].shape)}: expected {want} rows (config's sizes)")
        if f"{mixer}.in_proj_ba.weight" not in state:
            continue  # reported as missing by the rules
        parts = split_qwen3_next(out.pop(key), out.pop(f"{mixer}.in_proj_ba.weight"), sizes)
        out.update({f"{mixer}.{name}": tensor for name, tensor in parts.items()})
    return out


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Without the multi-token prediction weights; the fused linear-attention projections split, transformers 5's
    fused experts split into the per-expert tensors `rules` read."""
    state = split_fused_experts(without_mtp(state, MODEL_TYPE), "mlp", EXPERT_NAMES)
    return _split_projections(cfg, state)


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """Each linear-attention layer's four projections fused into Qwen3-Next's `in_proj_qkvz` and `in_proj_ba`."""
    sizes = model.cfg.gated_deltanet
    for key in [k for k in state if k.endswith(".linear_attn.in_proj_qkv.weight")]:
        mixer = key.removesuffix(".in_proj_qkv.weight")
        weights = {f"{name}.weight": state.pop(f"{mixer}.{name}.weight") for name in SPLIT}
        qkvz, ba = fuse_qwen3_next(weights, sizes)
        state[f"{mixer}.in_proj_qkvz.weight"], state[f"{mixer}.in_proj_ba.weight"] = qkvz, ba


FAMILY = register(
    Family(
        (MODEL_TYPE,),
        config_from_hf,
        config_to_hf,
        rules,
        ignore,
        prepare_state=prepare_state,
        finish_export=finish_export,
        experts=True,
        writes=("attention_output_gate", "mixer", "shared_expert_gate"),
    )
)
