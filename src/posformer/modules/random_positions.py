"""Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
Generalization of Transformers"), a training-time option for any encoding.

While training, each row's position ids are an ordered random subset of [0, L) instead of 0..T-1 (L =
`Config.random_positions`, larger than any training length), so the positions of long inputs (up to L) are
all seen during training, on short ones. Relative encodings see the same distances spread out, rotary ones
the angles of far positions. Evaluation and generation use the plain positions 0..T-1 unless the caller passes
position ids; `sample_positions` draws them as the paper's evaluation does.
"""

from __future__ import annotations

import torch
from torch import Tensor


def sample_positions(
    batch: int,
    length: int,
    max_position: int,
    device: torch.device | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """(batch, length) int64: for each row, `length` distinct positions drawn uniformly from [0, max_position),
    in increasing order. Raises `ValueError` when length > max_position."""
    if length > max_position:
        raise ValueError(
            f"cannot draw {length} distinct positions from [0, Config.random_positions="
            f"{max_position}): the input is longer than the range (raise random_positions)"
        )
    keys = torch.rand(batch, max_position, device=device, generator=generator)
    return keys.topk(length, dim=-1).indices.sort(dim=-1).values
