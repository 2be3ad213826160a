"""`Config.latent_attention`: multi-head latent attention (MLA, DeepSeek-V2/V3), checked and resolved
(`check_latent_attention`, part of `Config.validate`). The part itself is `posformer.modules.latent_attention`.

`latent_attention` is None (ordinary attention) or a dict:
  q_lora_rank   None (one query projection) or the width of the query's low-rank latent
  kv_lora_rank  the width of the latent c_kv every key and value is made from (what the KV cache keeps)
  nope_dim      each head's key/query part without position (made from c_kv per head)
  v_dim         each head's value width (made from c_kv per head)
The rope part of each head is `Config.d_head` wide (required), one key of that width shared by every head: the
position encoding sees heads of `d_head` features (DeepSeek's qk_rope_head_dim), and the default attention scale
is (nope_dim + d_head) ** -0.5.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from posformer.utils.limits import MAX_WIDTH
from posformer.utils.validation import check_int, fail

if TYPE_CHECKING:
    from posformer.config import Config

LATENT_KEYS = ("q_lora_rank", "kv_lora_rank", "nope_dim", "v_dim")
# the encodings MLA takes: those that act by `rotate` alone, so that a key rotated once can be cached
LATENT_POSITIONS = ("rope", "none")
# other fields and the values they must keep with latent attention: what `LatentAttention` does not implement
LATENT_UNSUPPORTED: dict[str, Any] = {
    "qk_norm": False,
    "key_smear": False,
    "attention_sinks": False,
    "attention_output_gate": False,
    "query_temperature": None,
    "init": "normal",
}


def latent_scale(cfg: "Config") -> float:
    """The default attention scale of latent attention: 1 / sqrt(nope_dim + d_head), a query-key product spanning
    both parts of a head."""
    return 1.0 / math.sqrt(cfg.latent_attention["nope_dim"] + cfg.head_dim)


def check_latent_attention(cfg: "Config") -> None:
    """`latent_attention` None or a dict of `LATENT_KEYS` (q_lora_rank may be left out: None), resolved in place;
    with it: arch decoder, an explicit `d_head`, no other key/value heads, an encoding of `LATENT_POSITIONS` on
    every layer and the fields of `LATENT_UNSUPPORTED` at their values."""
    latent = cfg.latent_attention
    if latent is None:
        return
    expected = f"None or a dict of {', '.join(LATENT_KEYS)} (q_lora_rank may be None)"
    if not isinstance(latent, Mapping) or set(latent) - set(LATENT_KEYS):
        fail("Config.latent_attention", latent, expected)
    latent = {"q_lora_rank": None, **latent}
    for key in LATENT_KEYS:
        if key not in latent:
            fail("Config.latent_attention", cfg.latent_attention, f"{expected}: {key!r} is missing")
        if latent[key] is not None or key != "q_lora_rank":
            check_int(f"Config.latent_attention[{key!r}]", latent[key], maximum=MAX_WIDTH)
    cfg.latent_attention = {key: latent[key] for key in LATENT_KEYS}
    why = "with latent_attention"
    if cfg.arch != "decoder":
        fail("Config.arch", cfg.arch, f"'decoder' {why} (a causal stack's compressed KV cache)")
    if cfg.d_head is None:
        fail("Config.d_head", None, f"the rope width of a head (DeepSeek's qk_rope_head_dim) {why}")
    if cfg.n_kv_heads not in (None, cfg.n_heads):
        fail("Config.n_kv_heads", cfg.n_kv_heads, f"None or n_heads={cfg.n_heads} {why} (every head reads one latent)")
    for name, value in LATENT_UNSUPPORTED.items():
        if getattr(cfg, name) != value:
            fail(f"Config.{name}", getattr(cfg, name), f"{value!r} {why} (not implemented there)")
    if cfg.norm == "deepnorm":
        fail("Config.norm", cfg.norm, f"a norm other than 'deepnorm' {why} (DeepNet's init scales a fused qkv)")
    if cfg.position not in LATENT_POSITIONS:  # a layer type's own position: its config, validated with it
        fail(
            "Config.position",
            cfg.position,
            f"one of {', '.join(LATENT_POSITIONS)} {why} (the cache keeps each key rotated once: an encoding that "
            "acts by rotate alone)",
        )
