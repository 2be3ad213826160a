"""Query temperature that grows with position: log-n attention scaling as Llama 4 tunes it.

A query at position p is multiplied by

    t(p) = 1 + scale * ln(1 + floor((p + 1) / floor_size))

so the logits of far-out queries grow as the log of the number of keys they see, keeping attention from
flattening over long inputs (Llama 4's `attn_temperature_tuning`, on its NoPE layers; Nakanishi 2025,
"Scalable-Softmax Is Superior for Attention"). t(p) = 1 until p + 1 reaches `floor_size`. Positions are the
position ids, so a left-padded row gets the temperature of its real positions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posformer.utils.validation import fail, is_int, is_number

KEYS = ("scale", "floor_size")


def check_query_temperature(name: str, value: Any) -> None:
    """None, or {"scale": a number > 0, "floor_size": an integer >= 1}; else a `ValueError` naming `name`."""
    if value is None:
        return
    if (
        not isinstance(value, dict)
        or set(value) != set(KEYS)
        or not is_number(value["scale"])
        or value["scale"] <= 0
        or not is_int(value["floor_size"])
        or value["floor_size"] < 1
    ):
        fail(name, value, 'None or {"scale": a number > 0, "floor_size": an integer >= 1} (Llama 4: 0.1, 8192)')


def query_temperature(pos: Tensor, scale: float, floor_size: int) -> Tensor:
    """pos: (B, T) position ids -> t(pos): (B, 1, T, 1) float32, to multiply the queries (B, H, T, dh) by."""
    steps = torch.div(pos.float() + 1.0, floor_size, rounding_mode="floor")
    return (1.0 + scale * torch.log1p(steps))[:, None, :, None]
