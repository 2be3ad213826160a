"""GLM-4.5 (model_type "glm4_moe"): GQA with partial RoPE, dense first layers, then DeepSeek-V3's mixture of experts.

Attention: q/k/v with biases under `attention_bias` (o_proj never has one), an optional per-head QK-norm before RoPE
(`use_qk_norm`, `Config.qk_norm`), heads of `head_dim`. RoPE rotates the first `partial_rotary_factor` of each
head (0.5 when the config leaves it out, as transformers does; `rotary_fraction`), in the "half" layout: pairs
(i, i + r/2) of those r dims, `rotate_half` in transformers 4.57.6 and 5.x alike, + linear / dynamic / yarn /
llama3 scaling. Layers before `first_k_dense_replace` are a dense SwiGLU of `intermediate_size` (`Config.moe_layers`,
`d_ff`); the others a mixture of `n_routed_experts` experts of `moe_intermediate_size` (`Config.expert_d_ff`),
each token to `num_experts_per_tok`, routed as DeepSeek-V3 (`Config.sigmoid_router`,
`posformer.modules.sigmoid_router`): sigmoid scores, `e_score_correction_bias` (the router's `score_bias`) for the
choice only, the top-k within the `topk_group` best of `n_group` groups, `norm_topk_prob`, times
`routed_scaling_factor`; plus `n_shared_experts` shared experts, one SwiGLU of their total width
(`Config.shared_expert_d_ff`) every token goes through. transformers 4.57.6 fills the experts of the groups left out
with 0, 5.x with -inf (as posformer): they differ only with negative correction biases (see `sigmoid_router`).
transformers computes no load-balancing loss for GLM-4.5: `router_aux_loss_coef` is 0 (`aux_loss` is still
posformer's Switch loss of the router logits, not added to the loss). Heads: Glm4MoeForCausalLM (causal_lm),
Glm4MoeModel (none).

Multi-token prediction: the `num_nextn_predict_layers` MTP layers a checkpoint may store after the last layer
(`model.layers.{num_hidden_layers + j}`) are not part of the model's forward: transformers leaves them out of
Glm4MoeForCausalLM (`_keys_to_ignore_on_load_unexpected`; 5.x runs them only as a separate draft model for
`generate(use_mtp=True)`), and posformer drops them too (`prepare_state`); a layer beyond those the config
declares is refused as an unknown tensor. `to_hf` writes `num_nextn_predict_layers` 0. A model with no expert layer
(`first_k_dense_replace` >= `num_hidden_layers`, or `n_routed_experts` 0) is refused. transformers 5's fused
`mlp.experts.gate_up_proj` / `down_proj` (a state dict saved as its model holds it) are read too (`fused_experts`).
"""

from __future__ import annotations

import logging
import re

from torch import Tensor

from posformer.config import Config
from posformer.hf.decoder_fields import gated_decoder_fields
from posformer.hf.family import Family, register, unsupported
from posformer.hf.fused_experts import split_fused_experts
from posformer.hf.layout import require_decoder_layout, require_default_scale
from posformer.hf.llama import HIDDEN_ACT, ignore, llama_like_to_hf
from posformer.hf.mapping import Rule, same
from posformer.hf.mixtral import EXPERT_NAMES, attention_rules, dense_ffn_rules, moe_decoder_rules, routed_experts_rules
from posformer.hf.rope import partial_rope_params, rope_to_hf
from posformer.utils.validation import is_int

MODEL_TYPE = "glm4_moe"
DEFAULT_ROTARY_FRACTION = 0.5  # transformers' Glm4MoeConfig: partial_rotary_factor 0.5 when not given
SHARED = "shared_expert"  # `MoEFeedForward`'s shared expert (`Config.shared_expert_d_ff`)

log = logging.getLogger(__name__)


def _moe_layers(hf: dict) -> list[bool]:
    """Which layers have experts: those from `first_k_dense_replace` on (transformers' Glm4MoeDecoderLayer)."""
    n, dense = hf["num_hidden_layers"], hf.get("first_k_dense_replace", 1)
    experts = hf.get("n_routed_experts", 128)
    if dense >= n or experts == 0:
        raise unsupported(
            MODEL_TYPE,
            f"no layer with experts (first_k_dense_replace={dense}, num_hidden_layers={n}, n_routed_experts={experts})",
        )
    return [i >= dense for i in range(n)]


def config_from_hf(hf: dict) -> Config:
    layers = _moe_layers(hf)
    n_shared = hf.get("n_shared_experts", 1)
    if not is_int(n_shared) or n_shared < 0:
        raise unsupported(MODEL_TYPE, f"n_shared_experts={n_shared!r} (expected an integer >= 0)")
    shared = n_shared * hf.get("moe_intermediate_size", 1408)
    return Config(
        **{**gated_decoder_fields(hf, MODEL_TYPE, norm_eps=1e-5), "n_kv_heads": hf.get("num_key_value_heads", 8)},
        router_aux_loss_coef=0.0,  # transformers computes no load-balancing loss for GLM-4.5
        d_ff=hf.get("intermediate_size", 10944),
        n_experts=hf.get("n_routed_experts", 128),
        experts_per_token=hf.get("num_experts_per_tok", 8),
        expert_d_ff=hf.get("moe_intermediate_size", 1408),
        norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
        moe_layers=None if all(layers) else layers,
        shared_expert_d_ff=shared or None,
        sigmoid_router={
            "groups": hf.get("n_group", 1),
            "top_groups": hf.get("topk_group", 1),
            "scale": hf.get("routed_scaling_factor", 1.0),
        },
        position="rope",
        position_params=partial_rope_params(hf, DEFAULT_ROTARY_FRACTION),
        max_positions=hf.get("max_position_embeddings", 131072),
        qkv_bias=bool(hf.get("attention_bias", False)),
        attn_out_bias=False,
        qk_norm=bool(hf.get("use_qk_norm", False)),
    )


def _n_shared_experts(cfg: Config) -> int:
    """`shared_expert_d_ff` as a number of experts of `expert_d_ff` units (0 for None); refused when not whole."""
    width = cfg.shared_expert_d_ff or 0
    if width % cfg.expert_ff_dim:
        raise unsupported(
            MODEL_TYPE,
            f"Config.shared_expert_d_ff={width}, not a multiple of expert_d_ff={cfg.expert_ff_dim} "
            "(n_shared_experts of moe_intermediate_size each) (to_hf)",
        )
    return width // cfg.expert_ff_dim


def config_to_hf(cfg: Config) -> dict:
    require_decoder_layout(
        cfg,
        MODEL_TYPE,
        ffn_bias=False,
        attn_out_bias=False,
        qk_norm_over="head",
        query_temperature=None,
        sliding_window=None,
        layer_types=None,
        router_bias=False,
        router_softmax="all",
        expert_activation=None,
        router_aux_loss_coef=0.0,
    )
    if cfg.sigmoid_router is None:
        raise unsupported(MODEL_TYPE, "Config.sigmoid_router=None (its router is DeepSeek-V3's sigmoid one) (to_hf)")
    if cfg.activation not in HIDDEN_ACT or cfg.position_params.get("layout") != "half":
        raise unsupported(MODEL_TYPE, "experts other than gated ones, or RoPE's interleaved layout (to_hf)")
    require_default_scale(cfg, MODEL_TYPE)
    layers = cfg.moe_layers or [True] * cfg.n_layers
    dense = layers.index(True)
    if any(not experts for experts in layers[dense:]):
        raise unsupported(
            MODEL_TYPE, f"Config.moe_layers={layers} (dense layers first, then expert layers only) (to_hf)"
        )
    router = cfg.sigmoid_router
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "Glm4Moe"),
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        "use_qk_norm": cfg.qk_norm,
        "first_k_dense_replace": dense,
        "moe_intermediate_size": cfg.expert_ff_dim,
        "n_routed_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.experts_per_token,
        "n_shared_experts": _n_shared_experts(cfg),
        "norm_topk_prob": cfg.norm_topk_prob,
        "n_group": router["groups"],
        "topk_group": router["top_groups"],
        "routed_scaling_factor": router["scale"],
        "num_nextn_predict_layers": 0,
        **rope_to_hf(cfg, partial=True),
        "partial_rotary_factor": float(cfg.position_params.get("rotary_fraction", 1.0)),
    }


def rules(cfg: Config) -> list[Rule]:
    """q/k/v fused, QK-norm; an expert layer's router `mlp.gate` (its weight and `e_score_correction_bias`), its
    experts' gate/up (up) and down projections and its shared experts' gate/up and down; a dense layer's gate/up
    fused into `ffn.up`."""

    def ffn(ours: str, theirs: str, layer: int) -> list[Rule]:
        mlp = f"{theirs}.mlp"
        if not cfg.uses_experts(layer):
            return dense_ffn_rules(f"{ours}.ffn", mlp, cfg.ff_dim)
        out = routed_experts_rules(cfg, f"{ours}.ffn", mlp)
        out.append(same(f"{ours}.ffn.sigmoid_router.score_bias", f"{mlp}.gate.e_score_correction_bias"))
        if cfg.shared_expert_d_ff is not None:
            out += dense_ffn_rules(f"{ours}.ffn.{SHARED}", f"{mlp}.shared_experts", cfg.shared_expert_d_ff)
        return out

    return moe_decoder_rules(cfg, attention_rules(cfg), ffn)


def _dropped(hf: dict, key: str, tensor: Tensor) -> bool:
    """Whether `key` is a tensor of an MTP layer the config declares, or an empty shared expert of
    n_shared_experts=0 (transformers builds its projections with no units)."""
    n, mtp = hf["num_hidden_layers"], hf.get("num_nextn_predict_layers", hf.get("num_mtp_layers")) or 0
    match = re.match(r"(?:model\.)?layers\.(\d+)\.", key)
    if match is not None and n <= int(match[1]) < n + mtp:
        return True
    return ".mlp.shared_experts." in key and tensor.numel() == 0 and not hf.get("n_shared_experts", 1)


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Without the MTP layers (transformers' Glm4MoeForCausalLM does not run them) or an empty shared expert;
    transformers 5's fused expert tensors split into the per-expert ones `rules` read."""
    dropped = {key for key, tensor in state.items() if _dropped(hf, key, tensor)}
    if dropped:
        log.info("glm4_moe: not loaded (multi-token prediction layers, empty shared experts): %s", sorted(dropped))
    kept = {key: tensor for key, tensor in state.items() if key not in dropped}
    return split_fused_experts(kept, "mlp", EXPERT_NAMES)


FAMILY = register(
    Family(
        (MODEL_TYPE,),
        config_from_hf,
        config_to_hf,
        rules,
        ignore,
        prepare_state=prepare_state,
        experts=True,
        writes=("sigmoid_router",),
    )
)
