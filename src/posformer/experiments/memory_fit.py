"""Whether a long evaluation fits in memory: an estimate of its peak, checked before any work starts.

`posformer extrapolate` and `posformer extend` score windows of up to 64k tokens (extend also fine-tunes at its
target length). `check_fit` compares each length's estimate with the memory available (the CPU: MemAvailable of
/proc/meminfo; CUDA: `torch.cuda.mem_get_info`) and raises `DoesNotFit` before the first step when one would not
fit, naming the length, the estimate, what is available and what to change.

The estimate of a decoder on B x T tokens (d = d_model, f = d_ff, V = vocab, P = `weight_count`, float32
throughout; bf16 autocast needs less), in bytes:
  evaluation (no gradients)
    weights      4 P for each model held at once
    activations  4 B T max(ATTENTION_WIDTH d, 2 d + u f): the widest moment of one block (the block before it is
                 freed): the residual and its norm beside the feed-forward's hidden tensors (u = 4 for a gated unit:
                 the fused up-projection's 2 f, the activation and the product; else 2), or beside q, k, v, their
                 rotated copies and the attention output
    head         8 R V: R = min(B T, `chunk_rows(V)`) rows of logits and their log-softmax
                 (`evaluation._token_nll` never holds (B, T, V))
    bias         with a bias encoding, BIAS_COPIES times one (B, H, rows, T) float32 block of it
                 (`bias_blocks.bias_block_rows`; the whole (B, H, T, T) when it is small)
    runtime      RUNTIME: what a run adds besides: library buffers, the allocator's slack, the experiment's texts,
                 token streams and tokenizer (set from two whole runs, below)
  a training step: 16 P (weights, gradients and AdamW's two moments) and 4 P for each other model held, 4 B T
    n_layers (TRAIN_WIDTH_D d + TRAIN_WIDTH_F f) (what each layer keeps for the backward), and the head, bias and
    runtime terms above.

Measured (the resident high-water mark `ru_maxrss` above the built model, one process each, one thread, the
`extrapolate` cpu preset's model: d 192, f 512, 4 layers, 4 heads, vocab 4096; batch 1 but where named;
estimates without the weights, which were built before the measure):

| phase | encoding | T | measured MiB | estimate MiB |
|---|---|---:|---:|---:|
| evaluation | rope | 4,096 | 225 | 422 |
| evaluation | rope | 16,384 | 358 | 536 |
| evaluation | rope | 65,536 | 671 | 992 |
| evaluation | alibi | 4,096 | 167 | 438 |
| evaluation | alibi | 16,384 | 191 | 552 |
| evaluation | alibi | 65,536 | 638 | 1,056 |
| evaluation | t5 | 16,384 | 208 | 552 |
| evaluation | shaw | 16,384 | 235 | 552 |
| training step | rope | 4,096 | 468 | 765 |
| training step | rope | 8,192 | 843 | 1,117 |
| training step | rope | 4 x 2,048 | 848 | 1,117 |

Two runs of the same probe differed by up to 90 MiB (rope at 16,384: 266 and 358). Whole runs, peak resident
memory (`/usr/bin/time -v`) against the largest estimate plus the process at the check (Python and torch: 0.22 GiB;
extend has read the source run's model, texts and token streams: 0.47 GiB):
  `extrapolate --preset cpu --positions rope,alibi --eval-lens 128,1024,8192,65536`: 1.25 GiB measured,
  1.06 + 0.22 estimated (alibi at 65,536);
  `extend --preset cpu --target-len 32768 --steps 2 --batch-size 1`: 3.22 GiB measured, 3.17 + 0.47 estimated
  (the fine-tuning step at 32,768).
So the estimate is above every measurement: one window alone by 1.5x to 1.7x at 65,536 and up to 2.9x at short
lengths, where the runtime term dominates; a whole run by 2% (extrapolate) and 13% (extend). Not covered: a
training step of a bias encoding in blocks of queries (long training lengths, which neither command trains at:
`extrapolate` trains at train_len, where the bias is whole, and `extend` fine-tunes RoPE) keeps more than its live
memory in glibc's heap (alibi at 8,192: 1,472 MiB measured, about 1,130 estimated).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from posformer import positions
from posformer.config import Config
from posformer.modules.bias_blocks import bias_block_rows
from posformer.modules.feedforward import GATED
from posformer.ops.linear_cross_entropy import chunk_rows

ATTENTION_WIDTH = 8  # d-wide float32 tensors per token alive at once in a no-grad attention (module docstring)
TRAIN_WIDTH_D, TRAIN_WIDTH_F = 16, 5  # float32 values per token and layer kept for the backward of a training step
BIAS_COPIES = 4  # the bias block, the mask's rows, their combination and the scores
RUNTIME = 256 * 2**20
MEMINFO = Path("/proc/meminfo")
GIB = 2**30


class DoesNotFit(ValueError):
    """A length whose work would not fit in the memory available (the message says which and what to change)."""


@dataclass(frozen=True)
class Need:
    """The estimated peak of one piece of work: `what` (e.g. "evaluating the rope row"), at `length` tokens in
    batches of `batch`; parts: {name: bytes}; `advice`: what to change when it does not fit."""

    what: str
    length: int
    batch: int
    parts: dict[str, int]
    advice: str

    @property
    def bytes(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        parts = " + ".join(f"{name} {gib(n)}" for name, n in self.parts.items())
        return f"{self.what} at {self.length:,} tokens (batch {self.batch}): about {gib(self.bytes)} ({parts})"


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _head_bias_runtime(cfg: Config, length: int, batch: int, device: torch.device) -> dict[str, int]:
    """The head, bias and runtime terms of the module docstring, in bytes."""
    parts = {"head": 8 * min(batch * length, chunk_rows(cfg.vocab_size)) * cfg.vocab_size}
    encoding = positions.get(cfg.position)
    if encoding.adds_bias:
        rows = bias_block_rows(batch, cfg.n_heads, length, length, device, encoding.cpu_bias_block_bytes) or length
        parts["bias"] = BIAS_COPIES * 4 * batch * cfg.n_heads * rows * length
    parts["runtime"] = RUNTIME
    return parts


def weight_count(cfg: Config) -> int:
    """About the parameters of a decoder of `cfg`: its embeddings (and untied head) and every layer's attention and
    feed-forward matrices (a mixture of experts: every expert's and the router's); norms, biases and position
    parameters are left out (under 1% for the presets)."""
    d, dh = cfg.d_model, cfg.head_dim
    attention = d * dh * (2 * cfg.n_heads + 2 * cfg.kv_heads)
    matrices = 3 if cfg.activation in GATED else 2
    dense = d * cfg.ff_dim * matrices
    experts = 0 if cfg.n_experts is None else cfg.n_experts * (d * cfg.expert_ff_dim * matrices + d)
    layers = cfg.decoder_layers
    expert_layers = sum(cfg.uses_experts(i) for i in range(layers))
    feed_forward = expert_layers * experts + (layers - expert_layers) * dense
    embeddings = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
    return embeddings + layers * attention + feed_forward


def evaluation_need(
    cfg: Config,
    length: int,
    batch: int,
    what: str,
    advice: str,
    device: torch.device | str = "cpu",
    models: int = 1,
) -> Need:
    """The estimated peak of scoring `batch` windows of `length` tokens without gradients (the module docstring),
    with `models` models of `cfg` held at once (a rescaled copy beside the trained one)."""
    device, tokens = torch.device(device), batch * length
    hidden = 4 if cfg.activation in GATED else 2
    parts = {
        "weights": 4 * models * weight_count(cfg),
        "activations": 4 * tokens * max(ATTENTION_WIDTH * cfg.d_model, 2 * cfg.d_model + hidden * cfg.ff_dim),
        **_head_bias_runtime(cfg, length, batch, device),
    }
    return Need(what, length, batch, parts, advice)


def training_need(
    cfg: Config,
    length: int,
    batch: int,
    what: str,
    advice: str,
    device: torch.device | str = "cpu",
    models: int = 1,
) -> Need:
    """The estimated peak of one training step (forward, backward, AdamW) on `batch` x `length` tokens, with
    `models` - 1 other models of `cfg` held beside the one trained."""
    device = torch.device(device)
    width = TRAIN_WIDTH_D * cfg.d_model + TRAIN_WIDTH_F * cfg.ff_dim
    parameters = weight_count(cfg)
    parts = {
        "weights, gradients, AdamW": 16 * parameters + 4 * (models - 1) * parameters,
        "activations": 4 * batch * length * cfg.decoder_layers * width,
        **_head_bias_runtime(cfg, length, batch, device),
    }
    return Need(what, length, batch, parts, advice)


def evaluation_advice(length: int, batch: int, knob: str) -> str:
    """What to change when scoring at `length` in batches of `batch` would not fit; `knob` names the lengths."""
    if batch == 1:
        return f"Evaluate fewer lengths (leave {length} out of {knob}); this is one window at a time already."
    return (
        f"Evaluate fewer lengths (leave {length} out of {knob}), or lower eval_batch_tokens "
        f"(--set eval_batch_tokens={length} scores one window at a time)."
    )


def available_bytes(device: torch.device | str) -> tuple[int, str] | None:
    """(bytes free for new work on `device`, where that number comes from), or None when it cannot be read."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free on {device} (torch.cuda.mem_get_info)"
    if device.type != "cpu" or not MEMINFO.is_file():
        return None
    for line in MEMINFO.read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            return int(value.split()[0]) * 1024, f"MemAvailable in {MEMINFO}"
    return None


def check_fit(label: str, needs: Iterable[Need], device: torch.device | str) -> None:
    """Raise `DoesNotFit` (its message prefixed by `label`) naming the shortest length whose work would not fit in
    the memory available on `device`, and every other one; nothing when all fit or the memory cannot be read."""
    found = available_bytes(device)
    if found is None:
        return
    available, source = found
    too_big = sorted((n for n in needs if n.bytes > available), key=lambda n: (n.length, n.bytes))
    if not too_big:
        return
    first = too_big[0]
    lengths = sorted({n.length for n in too_big})
    raise DoesNotFit(
        f"{label}: {first.describe()}; {gib(available)} is available ({source}). "
        f"Length(s) that would not fit: {', '.join(f'{n:,}' for n in lengths)}. {first.advice}"
    )
