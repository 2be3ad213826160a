"""The options the benchmarks share, declared once: how a run reports, where its models run, and the shape of a
llama-preset benchmark model. Each benchmark's options dataclass inherits the groups it uses (the last base's
fields come first in `--help`) and may give an inherited option a default of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from posformer.bench.runtime import PRECISION_CHOICES
from posformer.utils.options import option


@dataclass
class ReportOptions:
    """How every benchmark runs and reports."""

    options_group: ClassVar[str] = "run and report"

    threads: int | None = option(None, "torch.set_num_threads for every model (unset: torch's own number)", minimum=1)
    seed: int = option(0, "seed of the weights and of the random inputs", minimum=0)
    json: str | None = option(None, "also write the results as JSON to PATH (written atomically)", metavar="PATH")
    progress: bool = option(True, "hide the progress bars", flag="--no-progress")


@dataclass
class DeviceOptions:
    """Where the models run and in what."""

    options_group: ClassVar[str] = "device"

    device: str = option("cpu", "where every model runs: cpu, cuda or cuda:N (timed after torch.cuda.synchronize)")
    precision: str = option(
        "fp32",
        "fp32, or bf16 autocast over float32 weights (as trainer.precision=bf16), or auto: bf16 where the device "
        "has bf16 units (a CPU with AVX512-BF16 or AMX, a GPU), else fp32",
        choices=PRECISION_CHOICES,
    )


@dataclass
class LlamaShapeOptions:
    """The sizes of a llama-preset benchmark model and its timed iterations."""

    batch: int = option(8, "sequences per iteration", minimum=1)
    length: int = option(512, "tokens per sequence", minimum=1)
    d_model: int = option(512, "hidden size (d_model / hidden_size)", minimum=1)
    layers: int = option(8, "layers (per stack)", minimum=1)
    heads: int = option(8, "attention heads (key/value heads are the same number)", minimum=1)
    vocab: int = option(8192, "vocabulary size", minimum=1)
    d_ff: int = option(1376, "SwiGLU inner size (d_ff / intermediate_size)", minimum=1)
    warmup: int = option(1, "untimed iterations per model before timing, per phase", minimum=0)
    iters: int = option(3, "timed iterations per model, per phase; the median is reported", minimum=1)
    train: bool = option(True, "measure the forward pass only", flag="--skip-train")
