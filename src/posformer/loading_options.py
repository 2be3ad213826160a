"""The loading options as a `from_pretrained` user types them: `dtype` or `torch_dtype` (a torch dtype, its name,
or "auto": the dtype the checkpoint's weights were saved in), `device` or `device_map` ("cpu", "cuda", "cuda:1",
or "auto": the GPU when there is one, else the CPU; posformer places a model on one device).

    model = pf.load("runs/x", torch_dtype="auto", device_map="auto")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import torch
from safetensors import safe_open

DtypeLike = Union[torch.dtype, str, None]
DTYPE_NAMES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float64": torch.float64,
}
SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}


def _one_of(name: str, value: object, alias: str, alias_value: object) -> object:
    """`value` or `alias_value`, whichever is given; a `ValueError` when both are, and differ."""
    if value is not None and alias_value is not None and value != alias_value:
        raise ValueError(
            f"give {name} or {alias} (its other name), not both: {name}={value!r}, {alias}={alias_value!r}"
        )
    return value if value is not None else alias_value


def requested_dtype(dtype: DtypeLike = None, torch_dtype: DtypeLike = None) -> torch.dtype | str | None:
    """The dtype asked for: a floating torch dtype, "auto", or None (the loader's default, float32)."""
    value = _one_of("dtype", dtype, "torch_dtype", torch_dtype)
    if value is None or value == "auto" or (isinstance(value, torch.dtype) and value.is_floating_point):
        return value
    if isinstance(value, str) and value.removeprefix("torch.") in DTYPE_NAMES:
        return DTYPE_NAMES[value.removeprefix("torch.")]
    raise ValueError(
        f"dtype={value!r} is invalid: expected a floating torch dtype, one of {', '.join(DTYPE_NAMES)}, or 'auto' "
        "(the dtype the checkpoint was saved in)"
    )


def requested_device(device: str | torch.device | None = None, device_map: object = None) -> str | None:
    """The one device asked for ("cpu", "cuda", "cuda:N"), "auto" resolved; None: the CPU."""
    if isinstance(device_map, dict):
        raise ValueError(
            f"device_map={device_map!r} is invalid: posformer places a model on one device; give 'cpu', 'cuda', "
            "'cuda:N' or 'auto'"
        )
    value = _one_of("device", None if device is None else str(device), "device_map", device_map)
    if value is None:
        return None
    if value == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(value, str):
        raise ValueError(f"device_map={value!r} is invalid: expected 'cpu', 'cuda', 'cuda:N' or 'auto'")
    try:
        torch.device(value)
    except RuntimeError:
        raise ValueError(f"device={value!r} is invalid: expected 'cpu', 'cuda', 'cuda:N' or 'auto'") from None
    return value


def saved_dtype(folder: Path) -> torch.dtype:
    """The dtype of the floating weights saved in `folder` (its safetensors file, or the first shard), read from
    the header alone; float32 when there is no safetensors file (a .bin checkpoint is read as float32)."""
    files = sorted(folder.glob("model*.safetensors"))
    if not files:
        return torch.float32
    with safe_open(os.fspath(files[0]), framework="pt") as weights:
        for name in weights.keys():
            dtype = SAFETENSORS_DTYPES.get(weights.get_slice(name).get_dtype())
            if dtype is not None:
                return dtype
    return torch.float32
