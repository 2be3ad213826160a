"""Checks on tensor values (token ids, positions, labels) that never make the host wait for a device.

Reading a tensor's value in Python (`int(ids.max())`) waits for every queued kernel
on an accelerator and breaks a `torch.compile` graph. On the CPU in eager mode
the read is free, so there a failed check raises the usual `ValueError` with the
values it saw; elsewhere it is a device-side assert (`torch._assert_async`) that
raises a `RuntimeError` carrying the same message once the device gets there.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def reads_values_cheaply(t: Tensor) -> bool:
    """Whether Python may read t's values without a device wait or a graph break: eager and on the CPU."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


DEVICE_MESSAGE_LIMIT = 254  # CUDA's asynchronous assert refuses a longer message


def device_message(message: str) -> str:
    """`message` cut to what a device assert carries: at most DEVICE_MESSAGE_LIMIT characters, "..." marking a cut."""
    return message if len(message) <= DEVICE_MESSAGE_LIMIT else message[: DEVICE_MESSAGE_LIMIT - 3] + "..."


def check_values(ok: Tensor, message: str, seen: Callable[[], str] | None = None) -> None:
    """Raise unless the one-element bool tensor `ok` holds (`.all()` of an empty check holds):
    ValueError(message + ", got " + seen()) where values read cheaply, else an asynchronous device assert
    with `message` (cut by `device_message`)."""
    if not reads_values_cheaply(ok):
        torch._assert_async(ok, device_message(message))
    elif not bool(ok):
        raise ValueError(message if seen is None else f"{message}, got {seen()}")


def check_in_range(values: Tensor, low: int, high: int, message: str, allowed: int | None = None) -> None:
    """Every element of `values` in [low, high) (or equal to `allowed`); else `check_values` with `message`
    and the range seen. An empty `values` passes."""
    inside = (values >= low) & (values < high)
    if allowed is not None:
        inside |= values == allowed
    check_values(inside.all(), message, lambda: f"values in [{int(values.min())}, {int(values.max())}]")


def check_shape(value: Tensor, name: str, shape: tuple[int, int], integers: bool = False) -> None:
    """`value` is a tensor of `shape` (of an integer dtype when `integers`); else a `ValueError` naming it."""
    if not isinstance(value, Tensor):
        raise ValueError(f"{name} must be a tensor of shape {shape}, got {type(value).__name__}")
    if tuple(value.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(value.shape)}; expected (batch, length) = {shape}")
    if integers and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise ValueError(f"{name} must hold integers, got dtype {value.dtype}")


def check_token_ids(ids: Tensor, name: str, vocab_size: int) -> None:
    """`ids` is a non-empty (batch, length) integer tensor of ids in [0, vocab_size); else a `ValueError` naming it
    (on an accelerator the range is checked on the device, `check_in_range`)."""
    if not isinstance(ids, Tensor):
        raise ValueError(f"{name} must be a tensor of token ids (batch, length), got {type(ids).__name__}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got {tuple(ids.shape)}")
    if 0 in ids.shape:
        raise ValueError(f"{name} must hold at least one sequence of at least one token, got shape {tuple(ids.shape)}")
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    check_in_range(ids, 0, vocab_size, f"{name} must hold token ids in [0, vocab_size={vocab_size})")
