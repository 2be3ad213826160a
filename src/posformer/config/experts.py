"""The mixture-of-experts fields of `Config` (`n_experts` and the fields of its experts and router), checked
(`check_experts`, part of `Config.validate`). The part itself is `posformer.modules.moe`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posformer.config.sigmoid_router import check_sigmoid_router
from posformer.utils.limits import MODEL_SIZES
from posformer.utils.validation import check_int, check_number, fail, is_int

if TYPE_CHECKING:
    from posformer.config import Config

# each field that configures the experts, with its value when there are none (n_experts=None)
EXPERT_FIELDS: dict[str, Any] = {
    "experts_per_token": None,
    "expert_d_ff": None,
    "norm_topk_prob": True,
    "router_aux_loss_coef": 0.0,
    "moe_layers": None,
    "router_bias": False,
    "router_softmax": "all",
    "expert_activation": None,
    "shared_expert_d_ff": None,
    "shared_expert_gate": False,
    "sigmoid_router": None,
}
# the softmax over every expert's logit, over a token's top k only, or a sigmoid of each top-k logit that scales
# its expert's input (Llama 4)
ROUTER_SOFTMAX = ("all", "top_k", "sigmoid_input")
EXPERT_ACTIVATIONS = ("swiglu_clamped",)  # units of the experts other than `Config.activation`'s


def check_experts(cfg: "Config") -> None:
    """`n_experts` None or a positive integer; the fields of the experts only with it (see `Config`)."""
    check_number("Config.router_aux_loss_coef", cfg.router_aux_loss_coef, 0.0)
    if cfg.n_experts is None:
        for name, off in EXPERT_FIELDS.items():
            value = getattr(cfg, name)
            if value != off:
                fail(
                    f"Config.{name}",
                    value,
                    f"{off!r} with n_experts=None (it configures a mixture-of-experts feed-forward; set n_experts)",
                )
        return
    check_int("Config.n_experts", cfg.n_experts, maximum=MODEL_SIZES["n_experts"])
    k = cfg.experts_per_token
    if not (is_int(k) and 1 <= k <= cfg.n_experts):
        fail("Config.experts_per_token", k, f"an integer in [1, n_experts={cfg.n_experts}] (the experts of a token)")
    for name in ("expert_d_ff", "shared_expert_d_ff"):
        if getattr(cfg, name) is not None:
            check_int(f"Config.{name}", getattr(cfg, name), maximum=MODEL_SIZES["expert_d_ff"])
    if cfg.shared_expert_gate and cfg.shared_expert_d_ff is None:
        why = "False without shared_expert_d_ff (it gates the shared expert)"
        fail("Config.shared_expert_gate", cfg.shared_expert_gate, why)
    if cfg.router_softmax not in ROUTER_SOFTMAX:
        fail("Config.router_softmax", cfg.router_softmax, f"one of {ROUTER_SOFTMAX}")
    if cfg.expert_activation is not None and cfg.expert_activation not in EXPERT_ACTIVATIONS:
        fail("Config.expert_activation", cfg.expert_activation, f"None or one of {EXPERT_ACTIVATIONS}")
    check_sigmoid_router(cfg)
    layers = cfg.moe_layers
    if layers is None:
        return
    if cfg.arch == "encoder_decoder":
        fail("Config.moe_layers", layers, "None with arch='encoder_decoder' (one stack's layers only)")
    if not (
        isinstance(layers, (list, tuple)) and len(layers) == cfg.n_layers and all(isinstance(m, bool) for m in layers)
    ):
        fail("Config.moe_layers", layers, f"None or a list of n_layers={cfg.n_layers} bools (True: experts)")
    if not any(layers):
        fail("Config.moe_layers", layers, "a list with a True (no layer has experts: set n_experts=None)")
    cfg.moe_layers = list(layers)
