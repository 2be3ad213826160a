"""The options the benchmarks share, declared once: how a run reports, where its models run, the shape of a
benchmark model (its width, depth, heads, vocabulary and feed-forward size, each bounded by `utils.limits`) and the
sizes of a llama-preset benchmark. Each benchmark's options dataclass inherits the groups it uses (the last base's
fields come first in `--help`) and may give an inherited option a default of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from posformer.utils.limits import (
    MAX_BATCH,
    MAX_FF,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_LENGTH,
    MAX_REPEATS,
    MAX_SEED,
    MAX_THREADS,
    MAX_VOCAB,
    MAX_WIDTH,
)
from posformer.utils.options import option

PRECISIONS = {"fp32": "float32", "bf16": "bf16 autocast (float32 weights)"}  # name -> as a report says it
PRECISION_CHOICES = ("auto", *PRECISIONS)  # auto: bf16 where the device has bf16 units (`train.precision`)


@dataclass
class ReportOptions:
    """How every benchmark runs and reports."""

    options_group: ClassVar[str] = "run and report"

    threads: int | None = option(
        None, "torch.set_num_threads for every model (unset: torch's own number)", minimum=1, maximum=MAX_THREADS
    )
    seed: int = option(0, "seed of the weights and of the random inputs", minimum=0, maximum=MAX_SEED)
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
class ModelShapeOptions:
    """The sizes of a benchmark model, declared once: each benchmark's options inherit them and give them
    defaults of their own (`d_model: int = 768`)."""

    options_group: ClassVar[str] = "model shape"

    d_model: int = option(512, "hidden size (d_model / hidden_size)", minimum=1, maximum=MAX_WIDTH)
    layers: int = option(8, "layers (per stack)", minimum=1, maximum=MAX_LAYERS)
    heads: int = option(8, "attention heads (key/value heads are the same number)", minimum=1, maximum=MAX_HEADS)
    vocab: int = option(8192, "vocabulary size", minimum=1, maximum=MAX_VOCAB)


@dataclass
class FeedForwardShapeOptions(ModelShapeOptions):
    """The sizes of a benchmark model with a feed-forward inner size of its own (not 4 * d_model)."""

    options_group: ClassVar[str] = "model shape"

    d_ff: int = option(1376, "feed-forward inner size (d_ff / intermediate_size)", minimum=1, maximum=MAX_FF)


@dataclass
class LlamaShapeOptions(FeedForwardShapeOptions):
    """The sizes of a llama-preset benchmark model (SwiGLU: d_ff is its inner size) and its timed iterations."""

    batch: int = option(8, "sequences per iteration", minimum=1, maximum=MAX_BATCH)
    length: int = option(512, "tokens per sequence", minimum=1, maximum=MAX_LENGTH)
    warmup: int = option(1, "untimed iterations per model before timing, per phase", minimum=0, maximum=MAX_REPEATS)
    iters: int = option(
        3, "timed iterations per model, per phase; the median is reported", minimum=1, maximum=MAX_REPEATS
    )
    train: bool = option(True, "measure the forward pass only", flag="--skip-train")
