"""Multi-axis RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL): the rotary pairs shared out among the axes of the
position ids.

Position ids with axes, (3, B, T): temporal, height, width, as Hugging Face takes them. Each of the r/2 rotary
pairs turns with the position of one axis; `section` (t, h, w), with t + h + w = r/2, says how many pairs each
axis gets:
  contiguous (Qwen2-VL, Qwen2.5-VL): pairs [0, t) read the temporal axis, [t, t + h) the height, the rest the
    width;
  interleaved (Qwen3-VL, `mrope_interleaved`): pair i reads the height when i % 3 == 1 and i < 3h, the width when
    i % 3 == 2 and i < 3w, else the temporal axis, so that every axis keeps high and low frequencies.
A text token has one position on all three axes, so over text M-RoPE is RoPE exactly. An image of h x w patches
after n text tokens takes temporal position n, heights n..n+h-1, widths n..n+w-1, and the text after it goes on
from n + max(h, w) (`image_position_ids`).
"""

from __future__ import annotations

import torch
from torch import Tensor

AXES = ("temporal", "height", "width")


def check_section(section: object, pairs: int, name: str = "mrope_section") -> tuple[int, int, int]:
    """`section` as (t, h, w) when it is three non-negative integers summing to `pairs` (half the rotary width);
    a `ValueError` naming `name` otherwise."""
    ok = isinstance(section, (list, tuple)) and len(section) == 3
    ok = ok and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in section)
    if not ok or sum(section) != pairs:
        raise ValueError(
            f"{name}={section!r} is invalid: expected three integers >= 0 (temporal, height, width pairs) that sum "
            f"to {pairs}, half the rotary dimension"
        )
    return tuple(section)


def axis_of_pairs(section: tuple[int, int, int], interleaved: bool = False) -> Tensor:
    """Which axis (0 temporal, 1 height, 2 width) each rotary pair reads: (t + h + w,) int64."""
    pairs = sum(section)
    if not interleaved:
        return torch.repeat_interleave(torch.arange(3), torch.tensor(section))
    index = torch.arange(pairs)
    axis = torch.zeros(pairs, dtype=torch.long)
    for which in (1, 2):
        axis[(index % 3 == which) & (index < 3 * section[which])] = which
    return axis


def check_axes_positions(pos: Tensor, name: str = "position_ids") -> None:
    """A `ValueError` naming `name` unless `pos` is an integer tensor (3, B, T) of positions >= 0."""
    if not isinstance(pos, Tensor) or pos.dim() != 3 or pos.shape[0] != 3:
        shape = tuple(pos.shape) if isinstance(pos, Tensor) else type(pos).__name__
        raise ValueError(f"{name} of shape {shape} is invalid: expected (3, batch, length), one row per axis {AXES}")
    if pos.dtype.is_floating_point or pos.dtype == torch.bool or pos.is_complex():
        raise ValueError(f"{name} of dtype {pos.dtype} is invalid: expected integer positions")
    if pos.numel() and int(pos.min()) < 0:
        raise ValueError(f"{name} holds {int(pos.min())}: expected positions >= 0")


def token_positions(pos: Tensor) -> Tensor:
    """One position per token: pos (B, T) as it is, or the largest of its axes for ids with axes (3, B, T) ->
    (B, T). What a KV cache records and what anything but the rotation reads (a text token's axes are equal)."""
    return pos if pos.dim() == 2 else pos.amax(0)


def continued_axes(next_position: Tensor, length: int) -> Tensor:
    """The ids with axes (3, B, length) of `length` text tokens after a sequence whose largest position (over
    every axis) is next_position - 1, next_position: (B,): next_position.. next_position + length - 1 on all
    three axes, as Hugging Face goes on after an image (its rope deltas)."""
    steps = torch.arange(length, device=next_position.device)
    return (next_position[:, None] + steps).expand(3, -1, -1)


def mrope_cos_sin(pos: Tensor, inv_freq: Tensor, axis: Tensor, factor: float = 1.0) -> tuple[Tensor, Tensor]:
    """pos: (3, B, T) positions per axis; inv_freq: (r/2,); axis: (r/2,) the axis of each pair (`axis_of_pairs`)
    -> factor * cos, factor * sin of the angles pos[axis[i]] * inv_freq[i]: (B, 1, T, r/2), float32 (float64 for
    float64 inv_freq), the tables `rotary.apply_rotary` takes."""
    dtype = torch.promote_types(inv_freq.dtype, torch.float32)
    per_pair = pos.to(dtype).index_select(0, axis.to(pos.device))  # (r/2, B, T)
    angles = per_pair.permute(1, 2, 0)[:, None] * inv_freq.to(dtype)  # (B, 1, T, r/2)
    cos, sin = angles.cos(), angles.sin()
    return (cos * factor, sin * factor) if factor != 1.0 else (cos, sin)


def image_position_ids(text_before: int, height: int, width: int, text_after: int) -> Tensor:
    """The (3, T) position ids of `text_before` text tokens, an image of height x width patches as the language
    model sees them (after any spatial merge), and `text_after` text tokens, as Hugging Face's `get_rope_index`
    builds them: text on all axes alike; patch (row, column) at (n, n + row, n + column) after n text tokens; the
    text after it from n + max(height, width)."""
    for name, value in (("text_before", text_before), ("text_after", text_after)):
        if value < 0:
            raise ValueError(f"{name}={value} is invalid: expected a count >= 0")
    for name, value in (("height", height), ("width", width)):
        if value < 1:
            raise ValueError(f"{name}={value} is invalid: expected patches >= 1")
    before = torch.arange(text_before).expand(3, -1)
    rows = torch.arange(height).repeat_interleave(width)
    columns = torch.arange(width).repeat(height)
    image = torch.stack([torch.zeros_like(rows), rows, columns]) + text_before
    after = torch.arange(text_after).expand(3, -1) + text_before + max(height, width)
    return torch.cat([before, image, after], dim=1)
