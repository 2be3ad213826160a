"""The precision a run computes in: float32, or bf16 / fp16 autocast over float32 master weights, or `auto`.

    precision = resolve_precision("auto", "cpu")      # "bf16" on a CPU with bf16 units, else "fp32"
    with autocast(precision, device): loss = model(**batch).loss

`auto` picks bf16 where the device has bf16 matrix units (a CUDA GPU that runs bf16 natively; a CPU with
AVX512-BF16, AMX-BF16 or Arm's BF16 instructions) and float32 elsewhere; a run records the precision it resolved
to, never "auto". Under bf16 autocast the weights, their gradients and the optimizer state stay float32; the
matrix products run in bf16 (on the CPU, attention while training too: `posformer.ops.cpu_half_attention`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import ContextManager

import torch

from posformer.train.knobs import PRECISIONS

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISION_NAMES = {"fp32": "float32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}  # as a log says it
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # /proc/cpuinfo: x86's two, and Arm's (Features: bf16)
CPUINFO_LIMIT = 4 << 20  # bytes of /proc/cpuinfo read at most


@lru_cache(maxsize=1)
def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 matrix instructions, as torch's own check or /proc/cpuinfo says."""
    check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    if check is not None and check():
        return True
    try:
        with Path("/proc/cpuinfo").open("rb") as file:
            words = set(file.read(CPUINFO_LIMIT).decode("ascii", "replace").split())
    except OSError:
        return False
    return any(flag in words for flag in CPU_BF16_FLAGS)


def has_bf16_units(device: str | torch.device) -> bool:
    """Whether `device` ("cpu", "cuda", "cuda:N") computes bf16 matrix products natively."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    return device.type == "cpu" and cpu_has_bf16()


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """`precision` with "auto" resolved for `device`: "bf16" where it has bf16 units, else "fp32"."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is invalid: expected one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    return "bf16" if has_bf16_units(device) else "fp32"


def autocast(precision: str, device: str | torch.device) -> ContextManager[None]:
    """Compute in a resolved `precision` on `device`'s type: bf16 / fp16 autocast, or for "fp32" autocast off (so
    that float32 holds inside an outer autocast too)."""
    if precision == "fp32":
        return torch.autocast(torch.device(device).type, enabled=False)
    if precision not in AUTOCAST_DTYPES:
        raise ValueError(f"precision={precision!r} is not resolved: expected fp32, bf16 or fp16")
    return torch.autocast(torch.device(device).type, dtype=AUTOCAST_DTYPES[precision])
