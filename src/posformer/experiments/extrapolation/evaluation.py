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

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer import positions
from posformer.model import Transformer

PROTOCOLS = ("nonoverlapping", "sliding")


def fits(model: Transformer, eval_len: int) -> bool:
    """Whether the model's position encoding represents positions 0 .. eval_len - 1."""
    longest = positions.get(model.cfg.position).max_length(model.cfg)
    return longest is None or eval_len <= longest


def _token_nll(model: Transformer, windows: Tensor) -> Tensor:
    """windows: (b, T) -> NLL of tokens 1 .. T-1 given their prefix: (b, T - 1) float32."""
    logits = model(windows).logits[:, :-1].float()
    return F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")


def _batches(windows: Tensor, batch_tokens: int) -> list[Tensor]:
    return list(windows.split(max(1, batch_tokens // windows.shape[1])))


def chunk_nll(model: Transformer, ids: Tensor, eval_len: int, batch_tokens: int) -> tuple[float, int]:
    """Non-overlapping protocol over one stream ids (N,) -> (summed NLL, number of scored tokens)."""
    n = ids.numel() // eval_len
    chunks = ids[: n * eval_len].view(n, eval_len)
    total = 0.0
    for batch in _batches(chunks, batch_tokens):
        total += float(_token_nll(model, batch).double().sum())
    return total, n * (eval_len - 1)


def sliding_nll(model: Transformer, ids: Tensor, eval_len: int, stride: int, batch_tokens: int) -> tuple[float, int]:
    """Sliding-window protocol over ids (N,) -> (summed NLL, number of scored tokens).

    Window k covers ids[k*S : k*S + eval_len]; window 0 scores targets 1 .. eval_len-1,
    window k > 0 targets eval_len - S .. eval_len - 1 (its last S tokens).
    """
    if not 1 <= stride <= eval_len:
        raise ValueError(f"stride={stride} must be in [1, eval_len={eval_len}]")
    windows = ids.unfold(0, eval_len, stride)  # (n_windows, eval_len)
    total, count, first = 0.0, 0, True
    for batch in _batches(windows, batch_tokens):
        nll = _token_nll(model, batch)  # (b, eval_len - 1); column j predicts window token j + 1
        keep = torch.zeros_like(nll, dtype=torch.bool)
        keep[:, max(0, eval_len - 1 - stride):] = True
        if first:
            keep[0] = True
            first = False
        total += float(nll.double()[keep].sum())
        count += int(keep.sum())
    return total, count


def perplexity(model: Transformer, streams: dict[str, Tensor], eval_len: int, protocol: str = "nonoverlapping",
               stride: int | None = None, batch_tokens: int = 8192, precision: str = "fp32") -> float | None:
    """Token-weighted perplexity over documents {name: (N_d,) ids}; None when eval_len does not fit the model.

    Chunks never cross documents. Runs in eval mode under torch.no_grad (bf16/fp16 autocast when asked).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    if not fits(model, eval_len):
        return None
    device = next(model.parameters()).device
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad(), autocast:
            for ids in streams.values():
                ids = ids.to(device)
                if protocol == "sliding":
                    nll, n = sliding_nll(model, ids, eval_len, min(stride or eval_len, eval_len), batch_tokens)
                else:
                    nll, n = chunk_nll(model, ids, eval_len, batch_tokens)
                total, count = total + nll, count + n
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError(f"no token to score at eval_len={eval_len}: the evaluation streams are too short")
    return math.exp(total / count)
