"""The sizes a model's config may ask for, checked before any tensor is allocated.

    model = meta_model(cfg, config_path)   # its tensors' names and shapes, on the meta device (no memory)
    check_fits(model, config_path)         # the bytes it will take, against the machine's memory

A config.json of a few bytes could otherwise ask for a model of `d_model = 2**30` (an allocation of hundreds of
gigabytes, naming no file) or of `n_layers = 10**6` (minutes spent building a million layers). `Config.validate`
refuses each size field beyond its bound (`utils.limits.MODEL_SIZES`) when the config is read; the loaders then
build the model on the meta device, check the bytes it will take and the shapes it describes against the weights
file's header (`native.check_weights`, reading no tensor data), before they build the model for real.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from posformer.config import Config
from posformer.model import Transformer


def meta_model(cfg: Config, source: str | os.PathLike) -> Transformer:
    """The model `cfg` describes, built on the meta device (shapes only: no memory, no initialisation); a
    `ValueError` naming `source` when even its shapes cannot be computed (a size that overflows)."""
    try:
        with torch.device("meta"):
            return Transformer(cfg)
    except (RuntimeError, OverflowError) as err:
        raise ValueError(f"{source} describes a model whose sizes cannot be built: {err}") from None


def model_bytes(model: torch.nn.Module) -> int:
    """The bytes of `model`'s parameters and buffers (tied tensors counted once)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def memory_bytes() -> int | None:
    """The machine's physical memory in bytes, or None where it cannot be told."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits(model: torch.nn.Module, source: str | Path) -> None:
    """A `ValueError` naming `source` when building `model` (a meta model) for real would take more bytes than the
    machine's memory."""
    needed, available = model_bytes(model), memory_bytes()
    if available is not None and needed > available:
        raise ValueError(
            f"{source} describes a model of {needed / 2**30:,.1f} GiB of parameters and buffers, more than this "
            f"machine's {available / 2**30:,.1f} GiB of memory"
        )
