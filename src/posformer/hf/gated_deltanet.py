"""The weights of a gated DeltaNet layer (`posformer.modules.gated_deltanet`) in Hugging Face's two layouts: what a
Qwen3-Next or Qwen3.5 family needs to read and write its linear-attention layers (`linear_attn`): `qwen3_next` and
`qwen3_5_text` use it (`to_hf` refuses a model with such layers for the other families: `Config.mixer`).

Qwen3.5 (`Qwen3_5GatedDeltaNet`, transformers 5) names its tensors as posformer does: `in_proj_qkv` (the queries,
keys and values, 2 Hk dk + Hv dv rows), `in_proj_z`, `in_proj_b`, `in_proj_a`, `conv1d`, `A_log`, `dt_bias`,
`norm`, `out_proj`: a plain copy (`gated_deltanet_rules`).

Qwen3-Next (`Qwen3NextGatedDeltaNet`, transformers 4.57 and 5) fuses them by query/key head: `in_proj_qkvz` rows
(Hk, [q (dk), k (dk), v (r dv), z (r dv)]) and `in_proj_ba` rows (Hk, [b (r), a (r)]), r = Hv / Hk value heads per
key head (`fix_query_key_value_ordering`); `split_qwen3_next` and `fuse_qwen3_next` convert.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.hf.mapping import Rule, same

GATED_DELTANET_TENSORS = (
    "in_proj_qkv.weight",
    "in_proj_z.weight",
    "in_proj_b.weight",
    "in_proj_a.weight",
    "conv1d.weight",
    "A_log",
    "dt_bias",
    "norm.weight",
    "out_proj.weight",
)


def gated_deltanet_rules(ours: str, theirs: str) -> list[Rule]:
    """The rules of one layer: our mixer `ours` (`decoder.layers.0.attn`) <- Qwen3.5's `theirs`
    (`model.layers.0.linear_attn`), every tensor under the same name."""
    return [same(f"{ours}.{name}", f"{theirs}.{name}") for name in GATED_DELTANET_TENSORS]


def split_qwen3_next(qkvz: Tensor, ba: Tensor, sizes: dict[str, int]) -> dict[str, Tensor]:
    """Qwen3-Next's fused `in_proj_qkvz.weight` (Hk (2 dk + 2 r dv), d) and `in_proj_ba.weight` (Hk 2 r, d) -> our
    `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a` weights. sizes: `Config.gated_deltanet`."""
    key_heads, key_dim, value_dim = sizes["key_heads"], sizes["key_dim"], sizes["value_dim"]
    per_key = sizes["value_heads"] // key_heads
    grouped = qkvz.unflatten(0, (key_heads, -1))  # (Hk, 2 dk + 2 r dv, d)
    q, k, v, z = grouped.split((key_dim, key_dim, per_key * value_dim, per_key * value_dim), dim=1)
    b, a = ba.unflatten(0, (key_heads, 2 * per_key)).split((per_key, per_key), dim=1)
    return {
        "in_proj_qkv.weight": torch.cat([part.flatten(0, 1) for part in (q, k, v)]),
        "in_proj_z.weight": z.flatten(0, 1),
        "in_proj_b.weight": b.flatten(0, 1),
        "in_proj_a.weight": a.flatten(0, 1),
    }


def fuse_qwen3_next(weights: dict[str, Tensor], sizes: dict[str, int]) -> tuple[Tensor, Tensor]:
    """The inverse of `split_qwen3_next`: our four projection weights -> Qwen3-Next's `in_proj_qkvz.weight` and
    `in_proj_ba.weight`."""
    key_heads, key_dim, value_dim = sizes["key_heads"], sizes["key_dim"], sizes["value_dim"]
    keys = key_heads * key_dim
    q, k, v = weights["in_proj_qkv.weight"].split((keys, keys, sizes["value_heads"] * value_dim))
    by_key_head = [t.unflatten(0, (key_heads, -1)) for t in (q, k, v, weights["in_proj_z.weight"])]
    ba = [weights[f"in_proj_{name}.weight"].unflatten(0, (key_heads, -1)) for name in ("b", "a")]
    return torch.cat(by_key_head, dim=1).flatten(0, 1), torch.cat(ba, dim=1).flatten(0, 1)
