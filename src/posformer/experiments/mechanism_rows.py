"""Rows that are mechanisms rather than position encodings: a change to the row's decoder beyond `Config.position`,
declared once, for `posformer extrapolate --positions` and `posformer bench --positions` / `--memory` beside the
registered encodings.

  irope          Llama 4's iRoPE (`posformer.irope_layers`): RoPE layers in chunks of L/4 tokens with a weightless
                 L2 QK-norm, every fourth layer NoPE over the whole context with the log-n query temperature
                 (its floor one chunk);
  gated_rope     RoPE with a sigmoid output gate per head from the layer's input (`Config.attention_output_gate`,
                 Qwen3-Next, Qwen3.5);
  deltanet_nope  Qwen3-Next's hybrid: three gated DeltaNet layers to one full-attention layer, the attention layers
                 NoPE (`Config.mixer`; the DeltaNet state is their position mechanism).

Each is applied to the row's config built on its base encoding (`base`), so that it keeps every other field of the
experiment: its shape, norms, scale, training length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the rows' names are read without torch (`--help`); the config module at first use
    from posformer.config import Config


@dataclass(frozen=True)
class MechanismRow:
    """A row's base encoding and the change that makes it the mechanism: apply(config, train_len) -> config."""

    base: str
    apply: Callable[[Config, int], Config]
    summary: str


def _irope(cfg: Config, train_len: int) -> Config:
    from posformer.config.irope import irope_layers

    chunk = max(1, train_len // 4)
    layers = irope_layers(cfg.n_layers, chunk=chunk, temperature={"scale": 0.1, "floor_size": chunk})
    return cfg.replace(**layers)


def _gated(cfg: Config, train_len: int) -> Config:
    return cfg.replace(attention_output_gate=True)


def _deltanet(cfg: Config, train_len: int) -> Config:
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(cfg.n_layers)]
    return cfg.replace(layer_types=types, layer_settings={"linear_attention": {"mixer": "gated_deltanet"}})


MECHANISM_ROWS = {
    "irope": MechanismRow("rope", _irope, "RoPE in chunks of L/4 + every 4th layer NoPE with log-n temperature"),
    "gated_rope": MechanismRow("rope", _gated, "RoPE + a sigmoid output gate per head"),
    "deltanet_nope": MechanismRow("none", _deltanet, "3 gated DeltaNet layers to 1 NoPE attention layer"),
}


def row_base(row: str) -> str:
    """The registered encoding a row is built on: the row itself, or a mechanism's base."""
    mechanism = MECHANISM_ROWS.get(row)
    return row if mechanism is None else mechanism.base


def with_mechanism(row: str, cfg: Config, train_len: int) -> Config:
    """`cfg` (built on `row_base(row)`) made into the row: unchanged for an encoding's row."""
    mechanism = MECHANISM_ROWS.get(row)
    return cfg if mechanism is None else mechanism.apply(cfg, train_len)
