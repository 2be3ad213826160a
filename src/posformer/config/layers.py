"""`Config.layer_types` and `Config.layer_settings`: the labels of a stack's layers and the fields each label
changes, checked and resolved (`check_layer_types`, part of `Config.validate`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from posformer import positions
from posformer.utils.validation import fail

if TYPE_CHECKING:
    from posformer.config import Config

LAYER_FIELDS = (
    "position",
    "position_params",
    "sliding_window",
    "attention_chunk",
    "query_temperature",
    "qk_norm",
    "qk_norm_kind",
    "mixer",
    "d_head",
    "n_kv_heads",
    "d_ff",
    "values_from_keys",
)
KEEPS_OWN = "full_attention"  # the label of a layer with the config's own settings (Hugging Face's name for it)


def _fail(name: str, value: Any, expected: str) -> None:
    fail(f"Config.{name}", value, expected)


def check_layer_types(cfg: "Config") -> None:
    """`layer_types` and `layer_settings` (see `Config`); each label's settings resolved."""
    if cfg.layer_types is None:
        if cfg.layer_settings:
            _fail("layer_settings", cfg.layer_settings, "{} without layer_types (they label the layers)")
        return
    if cfg.arch == "encoder_decoder":
        _fail("layer_types", cfg.layer_types, "None with arch='encoder_decoder' (one stack's layers only)")
    if (
        not isinstance(cfg.layer_types, (list, tuple))
        or len(cfg.layer_types) != cfg.n_layers
        or not all(isinstance(label, str) and label for label in cfg.layer_types)
    ):
        _fail("layer_types", cfg.layer_types, f"a list of n_layers={cfg.n_layers} labels (strings)")
    cfg.layer_types = list(cfg.layer_types)
    if not isinstance(cfg.layer_settings, Mapping):
        _fail("layer_settings", cfg.layer_settings, "a dict from a layer label to the fields it changes")
    cfg.layer_settings = dict(cfg.layer_settings)
    for label, settings in cfg.layer_settings.items():
        where = f"layer_settings[{label!r}]"
        if label not in cfg.layer_types:
            labels = ", ".join(sorted(set(cfg.layer_types)))
            _fail(where, settings, f"settings for a label of layer_types ({labels})")
        if not isinstance(settings, Mapping) or set(settings) - set(LAYER_FIELDS):
            _fail(where, settings, f"a dict of some of {', '.join(LAYER_FIELDS)}")
        try:
            layer = cfg.layer_config(label)
        except ValueError as err:
            raise ValueError(f"Config.{where}: {err}") from None
        own = positions.get(layer.position)
        if layer.position != cfg.position and own.embed is not positions.PositionEncoding.embed:
            _fail(
                f"{where}['position']",
                layer.position,
                "an encoding of the attention layers (the config's own "
                f"position, {cfg.position!r}, embeds the tokens once for the whole stack)",
            )
        # tagged with their encoding, as `position_params` is: a label that keeps the config's own position
        # starts from the new encoding's defaults when the config's position is swapped
        cfg.layer_settings[label] = {name: getattr(layer, name) for name in settings}
    for index, label in enumerate(cfg.layer_types):
        if label not in cfg.layer_settings and label != KEEPS_OWN:
            labels = ", ".join(repr(known) for known in [*cfg.layer_settings, KEEPS_OWN])
            _fail(
                f"layer_types[{index}]",
                label,
                f"one of {labels}: a label of layer_settings, or {KEEPS_OWN!r} for the config's own settings",
            )
