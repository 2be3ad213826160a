"""The `layer_types` of the families whose layers are local (one sliding window) or global, written by `to_hf`:
Cohere2, EXAONE 4, Olmo 3, GPT-OSS. Each family says which of its two kinds a layer's config is."""

from __future__ import annotations

from collections.abc import Callable

from posformer.config import Config
from posformer.hf.family import unsupported

LOCAL, GLOBAL = "sliding_attention", "full_attention"


def layers_to_hf(
    cfg: Config, model_type: str, kind: Callable[[Config], str | None], expected: str, default_window: int
) -> dict:
    """`layer_types` and `sliding_window` of `cfg`'s layers: kind(layer config) is LOCAL, GLOBAL or None for a
    layer the family cannot write (refused, `expected` describing the two kinds); every local layer must slide the
    same window, and `default_window` stands in when none slides."""
    types, windows = [], set()
    for layer in cfg.layer_configs(cfg.n_layers):
        label = kind(layer)
        if label is None:
            raise unsupported(model_type, f"layers other than {expected} (to_hf)")
        types.append(label)
        if label == LOCAL:
            windows.add(layer.sliding_window)
    if len(windows) > 1:
        raise unsupported(model_type, f"sliding windows of {len(windows)} sizes (to_hf)")
    return {"layer_types": types, "sliding_window": windows.pop() if windows else default_window}


def checked_layer_types(types: list, layers: int, model_type: str) -> list[str]:
    """`types` when it labels each of `layers` layers LOCAL or GLOBAL; refused by name otherwise."""
    if not isinstance(types, (list, tuple)) or len(types) != layers or set(types) - {LOCAL, GLOBAL}:
        raise unsupported(model_type, f"layer_types={types} (expected {layers} of {LOCAL!r} and {GLOBAL!r})")
    return list(types)


def layer_types_from_hf(hf: dict, model_type: str, every: object, layers: int | None = None) -> list[str]:
    """`layer_types`, or transformers 4.57.6's default: every `every`-th layer global, the others local (the
    config's `sliding_window_pattern`, or the family's fixed period). layers: the layer count, when the config may
    leave it out (its class default)."""
    layers = hf["num_hidden_layers"] if layers is None else layers
    types = hf.get("layer_types")
    if not types:
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise unsupported(model_type, f"sliding_window_pattern={every!r} without layer_types (expected an int)")
        types = [LOCAL if (i + 1) % every else GLOBAL for i in range(layers)]
    return checked_layer_types(types, layers, model_type)
