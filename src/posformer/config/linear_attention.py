"""`Config.mixer` and `Config.gated_deltanet`: the layers that mix tokens by the gated delta rule instead of
attention (Qwen3-Next's and Qwen3.5's linear-attention layers), checked and resolved (`check_gated_deltanet`, part
of `Config.validate`). The layer itself is `posformer.modules.gated_deltanet`.

`mixer` is "attention" (the default) or "gated_deltanet", for the whole stack or, as a per-layer setting
(`Config.layer_settings`), for the layers of a label: a Qwen3-Next-style hybrid is
`layer_types=["linear_attention"] * 3 + ["full_attention"]` (repeated), `layer_settings={"linear_attention":
{"mixer": "gated_deltanet"}}`, with any `position` on the attention layers.

`gated_deltanet` is None (every size by default) or a dict of some of:
  key_heads     heads of the queries and keys (default n_heads)
  value_heads   heads of the values, gates and outputs, a multiple of key_heads (default key_heads); each query
                and key head serves value_heads // key_heads consecutive value heads
  key_dim       width of a query and key head (default d_head)
  value_dim     width of a value head (default key_dim)
  conv_kernel   taps of the causal depthwise convolution over the queries, keys and values (default 4)
  chunk_size    tokens of a chunk of the chunked form (default 64): more is fewer sequential steps, each with a
                (chunk_size, chunk_size) system per head
resolved in place to every key. A layer with the gated delta rule has no position encoding, no attention window and
no attention weights: arch decoder, no sliding_window, attention_chunk or query_temperature on it, no DeepNorm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from posformer.utils.limits import MAX_HEADS, MAX_WIDTH
from posformer.utils.validation import check_choice, check_int, fail

if TYPE_CHECKING:
    from posformer.config import Config

GATED_DELTANET = "gated_deltanet"
MIXERS = ("attention", GATED_DELTANET)
GATED_DELTANET_KEYS = ("key_heads", "value_heads", "key_dim", "value_dim", "conv_kernel", "chunk_size")
GATED_DELTANET_MAXIMA = {
    "key_heads": MAX_HEADS,
    "value_heads": MAX_HEADS,
    "key_dim": MAX_WIDTH,
    "value_dim": MAX_WIDTH,
    "conv_kernel": 256,
    "chunk_size": 4096,
}
# the other fields of a gated DeltaNet layer and the values they must keep there: what it has no use for
DELTANET_UNSUPPORTED: dict[str, Any] = {"sliding_window": None, "attention_chunk": None, "query_temperature": None}
WHY = f"with mixer={GATED_DELTANET!r}"


def gated_deltanet_defaults(cfg: "Config") -> dict[str, int]:
    """The sizes a gated DeltaNet layer of `cfg` takes when `gated_deltanet` leaves them out."""
    return {"key_heads": cfg.n_heads, "key_dim": cfg.head_dim, "conv_kernel": 4, "chunk_size": 64}


def uses_gated_deltanet(cfg: "Config") -> bool:
    """Whether a layer of `cfg` (the config's own mixer, or a label's in `layer_settings`) is a gated DeltaNet."""
    labels = cfg.layer_settings.values() if isinstance(cfg.layer_settings, Mapping) else []
    return cfg.mixer == GATED_DELTANET or any(
        isinstance(s, Mapping) and s.get("mixer") == GATED_DELTANET for s in labels
    )


def check_gated_deltanet(cfg: "Config") -> None:
    """`mixer` one of `MIXERS`; `gated_deltanet` None or a dict of `GATED_DELTANET_KEYS`, resolved in place when a
    layer uses it; a gated DeltaNet layer's other fields as it needs them (see the module docstring)."""
    check_choice("Config.mixer", cfg.mixer, MIXERS)
    sizes = cfg.gated_deltanet
    if sizes is not None and (not isinstance(sizes, Mapping) or set(sizes) - set(GATED_DELTANET_KEYS)):
        fail("Config.gated_deltanet", sizes, f"None or a dict of some of {', '.join(GATED_DELTANET_KEYS)}")
    if sizes is None and not uses_gated_deltanet(cfg):
        return
    sizes = {**gated_deltanet_defaults(cfg), **(sizes or {})}
    for key in ("key_heads", "key_dim"):
        check_int(f"Config.gated_deltanet[{key!r}]", sizes[key], maximum=GATED_DELTANET_MAXIMA[key])
    sizes = {"value_heads": sizes["key_heads"], "value_dim": sizes["key_dim"], **sizes}
    for key in GATED_DELTANET_KEYS:
        check_int(f"Config.gated_deltanet[{key!r}]", sizes[key], maximum=GATED_DELTANET_MAXIMA[key])
    if sizes["value_heads"] % sizes["key_heads"]:
        fail(
            "Config.gated_deltanet['value_heads']",
            sizes["value_heads"],
            f"a multiple of key_heads={sizes['key_heads']} (each query and key head serves whole value heads)",
        )
    cfg.gated_deltanet = {key: sizes[key] for key in GATED_DELTANET_KEYS}
    for label, settings in cfg.layer_settings.items() if cfg.layer_types is not None else ():
        mixer = settings.get("mixer", cfg.mixer)
        given = [name for name in ("position", "position_params") if name in settings]
        if mixer == GATED_DELTANET and given:
            fail(
                f"Config.layer_settings[{label!r}][{given[0]!r}]",
                settings[given[0]],
                f"no position setting {WHY} (its state orders the tokens; it has no position encoding)",
            )
    if cfg.mixer == GATED_DELTANET:
        _check_layer(cfg)


def _check_layer(cfg: "Config") -> None:
    """The fields a gated DeltaNet layer's config (the config's own, or a label's) must keep."""
    if cfg.arch != "decoder":
        fail("Config.arch", cfg.arch, f"'decoder' {WHY} (the gated delta rule is causal)")
    for name, value in DELTANET_UNSUPPORTED.items():
        if getattr(cfg, name) != value:
            fail(
                f"Config.{name}",
                getattr(cfg, name),
                f"{value!r} {WHY} (an attention setting; give {name}={value!r} in the label's layer_settings "
                "when the attention layers have one)",
            )
    if cfg.norm == "deepnorm":
        fail("Config.norm", cfg.norm, f"a norm other than 'deepnorm' {WHY} (DeepNet's init scales attention's qkv)")
