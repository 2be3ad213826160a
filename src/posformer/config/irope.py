"""`irope_layers`: Llama 4's interleaved position scheme (iRoPE) as `Config.layer_types` and `Config.layer_settings`.

Llama 4 (Meta 2025) leaves positions out of every fourth layer: its RoPE layers attend within chunks of 8192 tokens
and normalise q and k with a weightless L2 norm after the rotation; its NoPE layers attend to every key, with the
queries scaled by the log-n temperature of their position (`attn_temperature_tuning`). Each of these is a per-layer
setting of `Config` (`attention_chunk`, `qk_norm` / `qk_norm_kind`, `position`, `query_temperature`); this
function writes them for a stack of any size, to go on any config whose own position is the rotary one:

    cfg = pf.Config.preset("llama", **pf.irope_layers(8, chunk=8192))
"""

from __future__ import annotations

from typing import Any

from posformer import positions
from posformer.utils.validation import check_int, fail

LLAMA4_TEMPERATURE = {"scale": 0.1, "floor_size": 8192}
"""Llama 4's `attn_scale` and `floor_scale`: t(p) = 1 + 0.1 ln(1 + floor((p + 1) / 8192))."""


def irope_layers(
    n_layers: int,
    chunk: int | None = 8192,
    every: int = 4,
    temperature: dict[str, Any] | None = LLAMA4_TEMPERATURE,
    qk_norm: bool = True,
) -> dict[str, Any]:
    """The `Config` fields {"layer_types", "layer_settings"} of Llama 4's iRoPE over `n_layers` layers.

    Layer i is a NoPE layer ("nope": position "none", no chunks, `temperature` on its queries, None for none) when
    (i + 1) is a multiple of `every` (Llama 4's `no_rope_layer_interval`), else a RoPE layer ("rope": the config's
    own position, attention within chunks of `chunk` tokens (None: none) and, with `qk_norm`, Llama 4's weightless
    L2 QK-norm, `Config.qk_norm_kind="l2"`). Other fields (a preset's own QK-norm on the NoPE layers, its window)
    stay the config's own.
    """
    check_int("irope_layers: n_layers", n_layers)
    check_int("irope_layers: every", every)
    if chunk is not None:
        check_int("irope_layers: chunk", chunk)
    positions.check_query_temperature("irope_layers: temperature", temperature)
    if not isinstance(qk_norm, bool):
        fail("irope_layers: qk_norm", qk_norm, "True or False")
    rope: dict[str, Any] = {"attention_chunk": chunk}
    if qk_norm:
        rope.update(qk_norm=True, qk_norm_kind="l2")
    nope = {"position": "none", "attention_chunk": None, "query_temperature": temperature and dict(temperature)}
    types = ["nope" if (i + 1) % every == 0 else "rope" for i in range(n_layers)]
    settings = {label: value for label, value in (("rope", rope), ("nope", nope)) if label in types}
    return {"layer_types": types, "layer_settings": settings}
