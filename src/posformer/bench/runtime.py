"""Where and in what precision a benchmark runs: the device, bf16 autocast, the synchronisation that makes a
host timer measure the device's work, and the peak FLOP/s that model FLOPs utilisation (MFU) is measured against.

bf16 is mixed precision as `Trainer(precision="bf16")` runs it: float32 weights and optimizer state, the
forward and backward under `torch.autocast(dtype=torch.bfloat16)`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import ContextManager

import torch

from posformer.bench.options import PRECISION_CHOICES
from posformer.train.precision import resolve_precision

# dense bf16 tensor-core peaks from NVIDIA's datasheets, in TFLOP/s; the first name contained in the device's
# name wins, so the PCIe H100 is listed before the SXM one
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.4, "H200": 989.4, "A100": 312.0}


@dataclass(frozen=True)
class Runtime:
    """A benchmark's device and precision ("fp32" or "bf16")."""

    device: torch.device
    precision: str = "fp32"

    @classmethod
    def of(cls, device: str = "cpu", precision: str = "fp32") -> Runtime:
        """ValueError for an unknown precision, a device torch cannot parse, or CUDA where there is none; "auto"
        resolves to bf16 where the device has bf16 units, else fp32."""
        if precision not in PRECISION_CHOICES:
            raise ValueError(f"precision={precision!r} is invalid: expected one of {', '.join(PRECISION_CHOICES)}")
        try:
            parsed = torch.device(device)
        except RuntimeError as err:
            raise ValueError(f"device={device!r} is invalid: expected 'cpu', 'cuda' or 'cuda:N'") from err
        if parsed.type not in ("cpu", "cuda"):
            raise ValueError(f"device={device!r} is invalid: expected 'cpu', 'cuda' or 'cuda:N'")
        if parsed.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={device!r} is invalid: torch {torch.__version__} sees no CUDA device here")
        return cls(parsed, resolve_precision(precision, parsed))

    def autocast(self) -> ContextManager[None]:
        """bf16 autocast on the device, or nothing for fp32."""
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def synchronize(self) -> None:
        """Wait for the work queued on a CUDA device (a no-op on the CPU, whose calls return when done)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def name(self) -> str:
        """The device as a report names it: "cpu" or "cuda (NVIDIA H100 80GB HBM3)"."""
        if self.device.type == "cuda":
            return f"{self.device} ({torch.cuda.get_device_name(self.device)})"
        return str(self.device)

    def peak_tflops(self) -> float | None:
        """The device's dense bf16 peak in TFLOP/s when it is known (a listed GPU running bf16), else None."""
        if self.device.type != "cuda" or self.precision != "bf16":
            return None
        name = torch.cuda.get_device_name(self.device)
        return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), None)
