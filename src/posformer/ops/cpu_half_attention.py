"""Attention in bf16 (or fp16) on the CPU while training: two batched matmuls around a softmax.

SDPA's CPU flash kernel gains nothing from bf16 and its backward loses: measured on 2 threads with torch 2.13
(B=8, H=12, T=182, dh=32, a key-padding mask, 10 calls each), SDPA's forward took 7.3 ms in bf16 against 6.2 in
float32 and its backward 35.5 ms against 13.6, while written out as `baddbmm`, softmax and `bmm` the same call took
4.5 ms forward and 5.7 ms backward in bf16: the matmuls run on the CPU's bf16 units. In the span QA demo's
training step the flash backward alone was 224 ms of the 598 ms bf16 step.

The written-out kernel keeps the (B, H, T, S) probabilities for the backward, so it runs only where they are
small (at most `MAX_SCORES` elements per call); longer inputs keep SDPA, whose memory grows linearly with the
length. In evaluation (no gradient) SDPA's forward is as fast, so it keeps SDPA too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

MAX_SCORES = 2**24  # (B * H * T * S) elements: 32 MiB of bf16 probabilities kept per layer at most
HALF = (torch.bfloat16, torch.float16)


def use_cpu_half_attention(q: Tensor, k: Tensor) -> bool:
    """Whether `cpu_half_attention` should run: q (B, H, T, dh) and k (B, Hkv, S, dh) in bf16/fp16 on the CPU,
    a gradient to compute, and at most MAX_SCORES scores."""
    if q.device.type != "cpu" or q.dtype not in HALF or not (torch.is_grad_enabled() and q.requires_grad):
        return False
    batch, heads, length = q.shape[:3]
    return batch * heads * length * k.shape[-2] <= MAX_SCORES


def cpu_half_attention(
    q: Tensor, k: Tensor, v: Tensor, additive: Tensor | None, scale: float, dropout: float
) -> Tensor:
    """softmax(scale * q.k + additive) v in q's dtype.

    q: (B, H, T, dh); k, v: (B, Hkv, S, dh) with H a multiple of Hkv; additive: broadcastable to (B, H, T, S),
    finite (the masked pairs at the dtype's most negative value), or None -> (B, H, T, dh). The softmax reads
    and writes q's dtype and accumulates in float32 (torch's CPU kernel).
    """
    batch, heads, length, width = q.shape
    keys = k.shape[-2]
    repeat = heads // k.shape[1]
    if repeat > 1:
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    q3 = q.reshape(batch * heads, length, width)
    kt = k.reshape(batch * heads, keys, width).transpose(1, 2)
    if additive is None:
        scores = torch.bmm(q3, kt).mul_(scale)
    else:
        rows = 1 if additive.shape[-2] == 1 else length
        base = additive.to(q.dtype).expand(batch, heads, rows, keys).reshape(batch * heads, rows, keys)
        scores = torch.baddbmm(base, q3, kt, alpha=scale)
    probs = F.dropout(torch.softmax(scores, dim=-1), dropout, training=dropout > 0)
    return torch.bmm(probs, v.reshape(batch * heads, keys, width)).view(batch, heads, length, width)
