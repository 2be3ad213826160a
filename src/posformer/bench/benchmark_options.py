"""Each benchmark's options dataclass, declared without torch: `posformer bench [--BENCHMARK] --help` reads them
without importing a model, and each benchmark module (speed, generation, positions, memory, trainer, mlm) takes
its own from here. The groups they share are `options`; `--qa`'s are `qa.options`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from posformer.bench.options import (
    DeviceOptions,
    FeedForwardShapeOptions,
    LlamaShapeOptions,
    ModelShapeOptions,
    ReportOptions,
)
from posformer.experiments.mechanism_rows import MECHANISM_ROWS
from posformer.utils.limits import MAX_BATCH, MAX_LENGTH, MAX_REPEATS, MAX_SECONDS, MAX_STEPS, MAX_VOCAB
from posformer.utils.options import option

ARCHS = ("decoder", "encoder", "encoder_decoder")
ATTENTION = ("sdpa", "flex")
PHASES = ("forward", "train")
MMAP_THRESHOLD = 2**20


@dataclass
class SpeedOptions(ReportOptions, DeviceOptions, LlamaShapeOptions):
    """The options of `posformer bench` (the speed of the llama preset against Hugging Face)."""

    compile: bool = option(
        False,
        "run posformer's model under torch.compile (HF's stays eager); the compilation time is reported apart, "
        "not timed",
    )


@dataclass
class GenerationOptions(ReportOptions, ModelShapeOptions):
    """The options of `posformer bench --generation`; the model is GPT-2 small's shape by default."""

    d_model: int = 768
    layers: int = 12
    heads: int = 12
    vocab: int = 50257
    batches: list[int] = option(
        default_factory=lambda: [1, 8],
        help="batch sizes to measure, each in turn",
        flag="--batch",
        minimum=1,
        maximum=MAX_BATCH,
        metavar="N",
    )
    new_tokens: int = option(128, "tokens generated per sequence (no eos stop)", minimum=1, maximum=MAX_LENGTH)
    prompt_length: int = option(16, "random prompt tokens per sequence", minimum=1, maximum=MAX_LENGTH)
    warmup: int = option(
        1, "untimed generate calls per model before timing, per batch size", minimum=0, maximum=MAX_REPEATS
    )
    iters: int = option(
        3, "timed generate calls per model, per batch size; the median is reported", minimum=1, maximum=MAX_REPEATS
    )


@dataclass
class PositionsOptions(ReportOptions, DeviceOptions, LlamaShapeOptions):
    """The options of `posformer bench --positions`: one model per encoding, the llama preset's parts."""

    batch: int = 4
    layers: int = 4
    encodings: list[str] | None = option(
        None,
        "encodings to measure (none is always measured, as the baseline); default: every registered one that "
        "--arch can use (`posformer.positions.names()`; an unknown name is refused with the list), and for a decoder "
        f"the mechanisms ({', '.join(MECHANISM_ROWS)}: `posformer.experiments.mechanism_rows`)",
        metavar="NAME",
    )
    arch: str = option("decoder", "the stack(s) every model has", choices=ARCHS)
    attn: str = option(
        "sdpa",
        "sdpa: SDPA wherever the encoding allows it, else eager; flex: FlexAttention (score_mod) for the encodings "
        "it takes, the rest as sdpa (training it needs CUDA)",
        choices=ATTENTION,
    )


@dataclass
class MemoryOptions(ReportOptions, FeedForwardShapeOptions):
    """The options of `posformer bench --memory`: by default the shape of issue 33's table."""

    threads: int | None = 2
    encodings: list[str] | None = option(
        None,
        "encodings to measure beside none (default: every registered decoder one, `posformer.positions.names()`; an "
        f"unknown name is refused with the list; and the mechanisms {', '.join(MECHANISM_ROWS)})",
        metavar="NAME",
    )
    lengths: list[int] = option(
        default_factory=lambda: [1024, 4096, 16384],
        help="sequence lengths, each measured apart",
        minimum=2,
        maximum=MAX_LENGTH,
    )
    phases: list[str] = option(
        default_factory=lambda: list(PHASES), help="forward (no grad) and/or train (one step)", choices=PHASES
    )
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    d_ff: int = 704
    vocab: int = 256
    batch: int = option(1, "sequences per step", minimum=1, maximum=MAX_BATCH)
    peers: bool = option(True, "also measure Hugging Face's models of t5, alibi, rope and relative_key")
    device: str = option("cpu", "cpu or cuda")
    timeout: int = option(900, "seconds per cell; past them the cell reads 'timeout'", minimum=1, maximum=MAX_SECONDS)
    plot: str | None = option(None, "also draw peak memory against length to this PNG", metavar="PATH")
    whole_bias: bool = option(
        False,
        "also measure each encoding that has a bias with the bias computed whole, in one piece, at every length (the "
        "path before blocks of queries; rows 'NAME whole'), its memory and seconds beside the blocks'",
    )
    activation_checkpointing: bool = option(
        False,
        "also measure each training step with activation checkpointing (rows 'NAME checkpointed': "
        "Transformer.set_activation_checkpointing; Hugging Face's gradient_checkpointing_enable for its models)",
    )
    release_freed: bool = option(
        False,
        f"run each cell with MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD} (glibc): blocks above 1 MiB come from mmap "
        "and go back to the system when freed, so the CPU peak is what was live, not what glibc's heap kept",
    )


@dataclass
class CharVocabShapeOptions(FeedForwardShapeOptions):
    """The benchmark model's shape, whose vocab may also be 0: the text's character vocabulary."""

    options_group: ClassVar[str] = "model shape"

    vocab: int = option(8192, "vocabulary size; 0: the text's character vocabulary", minimum=0, maximum=MAX_VOCAB)


@dataclass
class TrainerBenchOptions(ReportOptions, CharVocabShapeOptions):
    """The options of `posformer bench --trainer`: the model, the run and the timing."""

    threads: int | None = 2
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    d_ff: int = 688  # SwiGLU's inner size
    batch: int = option(8, "sequences per step", minimum=1, maximum=MAX_BATCH)
    seq_len: int = option(256, "tokens per sequence", minimum=2, maximum=MAX_LENGTH)
    steps: int = option(10, "timed steps per run", minimum=1, maximum=MAX_STEPS)
    warmup_steps: int = option(2, "untimed steps per run before timing", minimum=0, maximum=MAX_STEPS)
    repeats: int = option(5, "runs per loop, alternating; the median is reported", minimum=1, maximum=MAX_REPEATS)
    lr: float = option(3e-3, "peak learning rate", low=0, low_open=True)
    lr_warmup: int = option(5, "linear lr warm-up steps before the cosine decay", minimum=0, maximum=MAX_STEPS)


@dataclass
class MLMOptions(ReportOptions, DeviceOptions, FeedForwardShapeOptions):
    """The options of `posformer bench --mlm`: by default all-MiniLM-L6-v2's shape."""

    threads: int | None = 2
    d_model: int = 384
    layers: int = 6
    heads: int = 12
    d_ff: int = 1536
    vocab: int = 30522  # BERT's uncased
    batch: int = option(16, "sequences per step", minimum=1, maximum=MAX_BATCH)
    length: int = option(256, "tokens per sequence", minimum=2, maximum=MAX_LENGTH)
    mask_rate: float = option(
        0.15, "share of positions that keep a label (BERT's 15%); the others are -100", low=0, high=1, low_open=True
    )
    warmup: int = option(1, "untimed rounds before timing", minimum=0, maximum=MAX_REPEATS)
    iters: int = option(5, "timed rounds (each runs every model once)", minimum=1, maximum=MAX_REPEATS)
