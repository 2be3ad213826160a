"""Qwen3-MoE: Qwen3's attention (per-head QK-norm before RoPE) with mixture-of-experts layers.

Layer i has experts unless it is in `mlp_only_layers` or (i + 1) is not a multiple of `decoder_sparse_step`
(transformers 4.57.6's rule): `Config.moe_layers`, the other layers a dense SwiGLU of `intermediate_size`
(`Config.d_ff`). An expert layer's `mlp` is posformer's `MoEFeedForward`: `gate` (the router, no bias) scores
`num_experts` experts of `moe_intermediate_size` units (`Config.expert_d_ff`), each token goes to
`num_experts_per_tok`, weighted by the softmax over all experts, renormalised over its own only with
`norm_topk_prob` (`Config.norm_topk_prob`; False by default). With `use_sliding_window` every layer slides
`sliding_window` (`max_window_layers` is not read by transformers' Qwen3-MoE). `attention_bias` gives q/k/v/o
biases. Heads: Qwen3MoeForCausalLM (causal_lm), Qwen3MoeModel (none). `num_experts=0`, or a
`decoder_sparse_step` / `mlp_only_layers` that leave no layer with experts (a dense Qwen3 checkpoint: load it as
qwen3), are refused.

transformers 5 writes the number of experts as `num_local_experts` (4.57.6: `num_experts`); both are read, and
`to_hf` writes the one of the version it exports for. Its checkpoints keep 4.57.6's per-expert tensors (it fuses
them while loading and splits them again while saving); a checkpoint holding transformers 5's fused
`mlp.experts.gate_up_proj` / `down_proj` (a state dict saved as its model holds it) is read as well
(`fused_experts`).
"""

from __future__ import annotations

from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.fused_experts import split_fused_experts
from posformer.hf.llama import ignore
from posformer.hf.mapping import Rule
from posformer.hf.mixtral import (
    EXPERT_NAMES,
    attention_rules,
    common_fields,
    common_to_hf,
    dense_ffn_rules,
    moe_decoder_rules,
    routed_experts_rules,
)
from posformer.hf.rope import rope_params
from posformer.hf.versions import writer_major
from posformer.utils.validation import is_int

MODEL_TYPE = "qwen3_moe"


def _num_experts(hf: dict) -> int:
    """`num_experts` (transformers 4) or `num_local_experts` (5), 128 when neither is there; both, differing, are
    refused naming them."""
    given = {key: hf[key] for key in ("num_experts", "num_local_experts") if hf.get(key) is not None}
    if len(set(given.values())) > 1:
        raise unsupported(
            MODEL_TYPE,
            f"num_experts={given['num_experts']} beside num_local_experts="
            f"{given['num_local_experts']} (one number of experts, written once)",
        )
    return next(iter(given.values()), 128)


def _moe_layers(hf: dict) -> list[bool]:
    """Which layers have experts, as transformers 4.57.6's Qwen3MoeDecoderLayer decides."""
    n, step, dense = hf["num_hidden_layers"], hf.get("decoder_sparse_step", 1), hf.get("mlp_only_layers") or []
    if step < 1 or not all(is_int(i) for i in dense):
        raise unsupported(
            MODEL_TYPE, f"decoder_sparse_step={step}, mlp_only_layers={dense} (expected an integer >= 1, layer indices)"
        )
    layers = [i not in dense and (i + 1) % step == 0 for i in range(n)]
    if _num_experts(hf) == 0 or not any(layers):
        raise unsupported(
            MODEL_TYPE,
            f"no layer with experts (num_experts={_num_experts(hf)}, decoder_sparse_step={step}, "
            f"mlp_only_layers={dense}): a dense Qwen3 checkpoint, load it as qwen3",
        )
    return layers


def config_from_hf(hf: dict) -> Config:
    layers = _moe_layers(hf)
    bias = bool(hf.get("attention_bias", False))
    return Config(
        **common_fields(hf, MODEL_TYPE, norm_eps=1e-6),
        d_ff=hf.get("intermediate_size", 6144),
        n_experts=_num_experts(hf),
        experts_per_token=hf.get("num_experts_per_tok", 8),
        expert_d_ff=hf.get("moe_intermediate_size", 768),
        norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
        moe_layers=None if all(layers) else layers,
        position="rope",
        position_params=rope_params(hf),
        max_positions=hf.get("max_position_embeddings", 32768),
        qkv_bias=bias,
        attn_out_bias=bias,
        qk_norm=True,
        sliding_window=hf.get("sliding_window") if hf.get("use_sliding_window") else None,
    )


def config_to_hf(cfg: Config) -> dict:
    out = common_to_hf(cfg, MODEL_TYPE, "Qwen3Moe", qk_norm=True, qk_norm_over="head", attn_out_bias=cfg.qkv_bias)
    layers = cfg.moe_layers or [True] * cfg.n_layers
    return {
        **out,
        "moe_intermediate_size": cfg.expert_ff_dim,
        "num_experts": cfg.n_experts,
        "norm_topk_prob": cfg.norm_topk_prob,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [i for i, experts in enumerate(layers) if not experts],
        "attention_bias": cfg.qkv_bias,
        "use_sliding_window": cfg.sliding_window is not None,
        "sliding_window": cfg.sliding_window,
    }


def rules(cfg: Config) -> list[Rule]:
    """q/k/v fused, QK-norm; an expert layer's router `mlp.gate` and its experts' gate/up (up) and down
    projections, a dense layer's gate/up fused into `ffn.up`."""

    def ffn(ours: str, theirs: str, layer: int) -> list[Rule]:
        if not cfg.uses_experts(layer):
            return dense_ffn_rules(f"{ours}.ffn", f"{theirs}.mlp", cfg.ff_dim)
        return routed_experts_rules(cfg, f"{ours}.ffn", f"{theirs}.mlp")

    return moe_decoder_rules(cfg, attention_rules(cfg), ffn)


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """transformers 5's fused expert tensors split into the per-expert ones `rules` read."""
    return split_fused_experts(state, "mlp", EXPERT_NAMES)


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """The number of experts under the name of the transformers the export is for (5: `num_local_experts`)."""
    if writer_major(hf, "to_hf") >= 5:
        hf["num_local_experts"] = hf.pop("num_experts")


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
    )
)
