"""Perplexity at a given context length: the two protocols of Press, Smith & Lewis (2022, ALiBi).

non-overlapping: the stream is cut into consecutive chunks of `eval_len` tokens; every
    token but the first of each chunk is predicted from the tokens before it in its chunk.
sliding (stride S): windows of `eval_len` tokens start every S tokens; the first window
    scores all its predicted tokens, each later one only its last S (the tokens not scored
    yet), so almost every token sees eval_len - S tokens of context or more. Windows that
    would run past the stream end are not taken; S above eval_len is taken as eval_len. With S == eval_len this is the
    non-overlapping protocol (the Hugging Face `perplexity` recipe).

Perplexity = exp(total NLL / number of scored tokens), token-weighted over documents.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer import positions
from posformer.config import Config
from posformer.experiments.extrapolation.settings import PROTOCOLS
from posformer.model import Transformer
from posformer.ops.linear_cross_entropy import chunk_rows

Advance = Callable[[int], None]  # told the number of tokens each batch of windows has just scored


def fits(model: Transformer, eval_len: int) -> bool:
    """Whether the model's position encoding represents positions 0 .. eval_len - 1."""
    return represents(model.cfg, eval_len)


def represents(cfg: Config, eval_len: int) -> bool:
    """Whether a model of `cfg` represents positions 0 .. eval_len - 1 (`fits`, before the model is built)."""
    longest = positions.get(cfg.position).max_length(cfg.position_params, cfg.max_positions)
    return longest is None or eval_len <= longest


def _token_nll(model: Transformer, windows: Tensor) -> Tensor:
    """windows: (b, T) -> NLL of tokens 1 .. T-1 given their prefix: (b, T - 1) float64.

    The vocabulary logits are made `chunk_rows(vocab)` rows at a time (64 MiB in float32), never (b, T, V) at once:
    at T = 65,536 with a vocabulary of 4,096 those would be 1 GiB, and the log-softmax as much again.
    """
    hidden = model.decode(windows)[0][:, :-1].flatten(0, 1)  # (b * (T - 1), d_model)
    targets = windows[:, 1:].flatten()
    step = chunk_rows(model.cfg.vocab_size)
    nll = [
        F.cross_entropy(model.head(hidden[i : i + step]).float(), targets[i : i + step], reduction="none").double()
        for i in range(0, targets.numel(), step)
    ]
    return torch.cat(nll).view(windows.shape[0], -1)


def window_count(n_tokens: int, eval_len: int, stride: int) -> int:
    """How many windows of eval_len every `stride` tokens a stream of n_tokens holds (`scored_tokens`)."""
    return 0 if n_tokens < eval_len else (n_tokens - eval_len) // stride + 1


def scored_tokens(
    model: Transformer, ids: Tensor, eval_len: int, stride: int, batch_tokens: int, advance: Advance | None = None
) -> tuple[Tensor, Tensor]:
    """Score one stream ids (N,) in windows of eval_len every `stride` tokens -> (positions (M,), NLL (M,) float64).

    Window k covers ids[k*S : k*S + eval_len]; window 0 scores targets 1 .. eval_len-1, window k > 0 only
    the targets not scored yet (its last S). positions[i] is the index in ids of the token nll[i] predicts.
    S == eval_len is the non-overlapping protocol. A batch holds batch_tokens // eval_len windows, one at least
    (one window of eval_len at long lengths); `advance` is told the tokens (b * eval_len) of each batch scored.
    """
    if not 1 <= stride <= eval_len:
        raise ValueError(f"stride={stride} must be in [1, eval_len={eval_len}]")
    windows = ids.unfold(0, eval_len, stride)  # (n_windows, eval_len)
    per_batch = max(1, batch_tokens // eval_len)
    starts = (torch.arange(windows.shape[0], device=ids.device) * stride)[:, None]  # (n_windows, 1)
    positions, losses = [], []
    for batch, start in zip(windows.split(per_batch), starts.split(per_batch)):
        nll = _token_nll(model, batch)  # (b, eval_len - 1); column j predicts window token j + 1
        keep = torch.zeros_like(nll, dtype=torch.bool)
        keep[:, max(0, eval_len - 1 - stride) :] = True
        keep[start[:, 0] == 0] = True
        target = start + torch.arange(1, eval_len, device=ids.device)
        positions.append(target[keep])
        losses.append(nll[keep])
        if advance is not None:
            advance(batch.numel())
    return torch.cat(positions), torch.cat(losses)


def chunk_nll(model: Transformer, ids: Tensor, eval_len: int, batch_tokens: int) -> tuple[float, int]:
    """Non-overlapping protocol over one stream ids (N,) -> (summed NLL, number of scored tokens)."""
    _, nll = scored_tokens(model, ids, eval_len, eval_len, batch_tokens)
    return float(nll.sum()), nll.numel()


def sliding_nll(model: Transformer, ids: Tensor, eval_len: int, stride: int, batch_tokens: int) -> tuple[float, int]:
    """Sliding-window protocol over ids (N,) -> (summed NLL, number of scored tokens)."""
    _, nll = scored_tokens(model, ids, eval_len, stride, batch_tokens)
    return float(nll.sum()), nll.numel()


def _stride(eval_len: int, protocol: str, stride: int | None) -> int:
    """The distance between window starts: eval_len (nonoverlapping), else the stride (at most eval_len)."""
    return eval_len if protocol == "nonoverlapping" else min(stride or eval_len, eval_len)


def tokens_read(
    streams: dict[str, Tensor], eval_len: int, protocol: str = "nonoverlapping", stride: int | None = None
) -> int:
    """The tokens `block_losses` feeds the model at eval_len: windows times eval_len (what a progress bar counts)."""
    step = _stride(eval_len, protocol, stride)
    return sum(window_count(ids.numel(), eval_len, step) * eval_len for ids in streams.values())


@dataclass
class BlockLosses:
    """The scored tokens of some streams grouped in blocks of consecutive stream tokens.

    nll: (B,) float64 summed NLL per block; count: (B,) int64 scored tokens per block. Blocks never cross
    documents; a token belongs to the block its position (in its document) falls in, whichever window scored it.
    """

    nll: Tensor
    count: Tensor

    def perplexity(self) -> float:
        return math.exp(float(self.nll.sum()) / int(self.count.sum()))


def block_losses(
    model: Transformer,
    streams: dict[str, Tensor],
    eval_len: int,
    block_len: int,
    protocol: str = "nonoverlapping",
    stride: int | None = None,
    batch_tokens: int = 8192,
    precision: str = "fp32",
    advance: Advance | None = None,
) -> BlockLosses | None:
    """Score documents {name: (N_d,) ids} at eval_len, summed per block of block_len tokens; None when eval_len
    does not fit the model. The same block_len at every eval_len pairs the blocks across lengths (the bootstrap
    resamples them together). Runs in eval mode under torch.no_grad (bf16/fp16 autocast when asked); `advance`
    is told the tokens of each batch of windows scored (`tokens_read` in all)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    if not fits(model, eval_len):
        return None
    device = next(model.parameters()).device
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    step = _stride(eval_len, protocol, stride)
    was_training = model.training
    model.eval()
    sums, counts = [], []
    try:
        with torch.no_grad(), autocast:
            for ids in streams.values():
                n_blocks = -(-ids.numel() // block_len)
                positions, nll = scored_tokens(model, ids.to(device), eval_len, step, batch_tokens, advance)
                block = (positions // block_len).cpu()
                sums.append(torch.zeros(n_blocks, dtype=torch.float64).index_add_(0, block, nll.cpu()))
                counts.append(torch.bincount(block, minlength=n_blocks))
    finally:
        model.train(was_training)
    result = BlockLosses(torch.cat(sums), torch.cat(counts))
    if int(result.count.sum()) == 0:
        raise ValueError(f"no token to score at eval_len={eval_len}: the evaluation streams are too short")
    return result


def perplexity(
    model: Transformer,
    streams: dict[str, Tensor],
    eval_len: int,
    protocol: str = "nonoverlapping",
    stride: int | None = None,
    batch_tokens: int = 8192,
    precision: str = "fp32",
) -> float | None:
    """Token-weighted perplexity over documents {name: (N_d,) ids}; None when eval_len does not fit the model.

    Chunks never cross documents. Runs in eval mode under torch.no_grad (bf16/fp16 autocast when asked).
    """
    losses = block_losses(model, streams, eval_len, eval_len, protocol, stride, batch_tokens, precision)
    return None if losses is None else losses.perplexity()
