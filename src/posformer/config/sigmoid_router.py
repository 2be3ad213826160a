"""`Config.sigmoid_router`: DeepSeek-V3's router, checked and resolved (`check_sigmoid_router`, part of
`check_experts`). The part itself is `posformer.modules.sigmoid_router`.

`sigmoid_router` is None (the softmax router of `Config.router_softmax`) or a dict:
  groups      the experts split into this many groups of equal size (DeepSeek's n_group; 1: no groups)
  top_groups  a token picks its experts within the top_groups groups whose two best scores sum highest
              (topk_group)
  scale       the routing weights are multiplied by it (routed_scaling_factor)
A key left out takes 1 (no groups, no scale). DeepSeek's shared experts are `Config.shared_expert_d_ff`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from posformer.utils.validation import check_int, check_number, fail

if TYPE_CHECKING:
    from posformer.config import Config

SIGMOID_ROUTER_KEYS = ("groups", "top_groups", "scale")


def check_sigmoid_router(cfg: "Config") -> None:
    """With `n_experts` set: `sigmoid_router` None or a dict of `SIGMOID_ROUTER_KEYS`, resolved in place:
    `groups` 1 or dividing n_experts into groups of two or more experts (a group's score sums its best two),
    `top_groups` in [1, groups] holding at least `experts_per_token` experts, `scale` > 0; `router_softmax` at
    its default."""
    router = cfg.sigmoid_router
    if router is None:
        return
    expected = f"None or a dict of {', '.join(SIGMOID_ROUTER_KEYS)}"
    if not isinstance(router, Mapping) or set(router) - set(SIGMOID_ROUTER_KEYS):
        fail("Config.sigmoid_router", router, expected)
    router = {"groups": 1, "top_groups": 1, "scale": 1.0, **router}
    n_experts, groups = cfg.n_experts, router["groups"]
    check_int("Config.sigmoid_router['groups']", groups, maximum=n_experts)
    if n_experts % groups or (groups > 1 and n_experts // groups < 2):
        fail(
            "Config.sigmoid_router['groups']",
            groups,
            f"1 or a divisor of n_experts={n_experts} leaving two or more experts per group (a group's score "
            "sums its two best)",
        )
    check_int("Config.sigmoid_router['top_groups']", router["top_groups"], maximum=groups)
    reachable = router["top_groups"] * (n_experts // groups)
    if cfg.experts_per_token > reachable:
        fail(
            "Config.experts_per_token",
            cfg.experts_per_token,
            f"at most {reachable}, the experts of top_groups={router['top_groups']} groups of sigmoid_router",
        )
    check_number("Config.sigmoid_router['scale']", router["scale"], 0.0, low_open=True)
    if cfg.router_softmax != "all":
        fail("Config.router_softmax", cfg.router_softmax, "'all' (unused) with sigmoid_router (sigmoid scores)")
    cfg.sigmoid_router = {"groups": groups, "top_groups": router["top_groups"], "scale": float(router["scale"])}
