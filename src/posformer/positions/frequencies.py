"""The geometric frequencies that sinusoidal tables and rotary encodings share."""

from __future__ import annotations

import torch
from torch import Tensor


def frequencies(dim: int, base: float, device: torch.device | None = None) -> Tensor:
    """The inverse frequencies base^(-2i/dim) for i in [0, dim/2): (dim/2,) float32."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
