"""Products over grouped-query heads (Ainslie et al. 2023) that read each shared key or value head in place:
query heads h·g .. h·g + g - 1 share key head h, g = H / Hkv, and no key or value is copied per query head."""

from __future__ import annotations

import torch
from torch import Tensor


def grouped_scores(q: Tensor, k: Tensor) -> Tensor:
    """q (B, H, Tq, dh), k (B, Hkv, Tk, dh) -> q·k (B, H, Tq, Tk)."""
    grouped = q.unflatten(1, (k.shape[1], q.shape[1] // k.shape[1]))  # (B, Hkv, g, Tq, dh)
    return torch.matmul(grouped, k.unsqueeze(2).transpose(-1, -2)).flatten(1, 2)


def grouped_values(weights: Tensor, v: Tensor) -> Tensor:
    """weights (B, H, Tq, Tk), v (B, Hkv, Tk, dv) -> weights·v (B, H, Tq, dv)."""
    grouped = weights.unflatten(1, (v.shape[1], weights.shape[1] // v.shape[1]))
    return torch.matmul(grouped, v.unsqueeze(2)).flatten(1, 2)
