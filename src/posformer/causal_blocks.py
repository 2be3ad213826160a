"""Causal attention with a bias, on the CPU, one block of queries at a time.

With a bias, SDPA cannot be told `is_causal`: the causal order travels in the
mask, and the kernel computes every (query, key) pair, the half that the mask
then throws away included. A bias that needs a gradient (T5, KERPLE, FIRE, the
q.r encodings) even sends SDPA to its math path, which materialises the whole
(B, H, T, T) scores and softmax. Cut into blocks of `BLOCK_ROWS` queries, block
b attends only to the keys up to its last query, so the pairs past it are never
computed: (n + 1) / 2n of the work for n blocks, and scores small enough to stay
in cache. Measured on 2 threads (B=4, H=8, T=512, dh=64, forward and backward):
a learned bias 79-80 ms whole, 38 ms in blocks of 128 rows (SDPA's flash kernel
without a bias: 40 ms); a fixed bias 42 ms whole, 32 ms in blocks.

Every block reads its rows of the one combined bias; the rows are taken with
`split`, whose backward concatenates, and not with a slice per block, whose
backward would allocate a whole (T, T) gradient per block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

BLOCK_ROWS = 128


def use_causal_blocks(q: Tensor, bias: Tensor | None, is_causal: bool) -> bool:
    """Whether `causal_blocks_attention` should run: a bias under a plain causal mask, on the CPU, with more
    than one block of queries. (CUDA's fused kernels take a bias with its gradient; `flex` skips blocks.)"""
    return bias is not None and is_causal and q.device.type == "cpu" and q.shape[-2] > BLOCK_ROWS


def causal_blocks_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float, dropout: float) -> Tensor:
    """softmax(scale * q.k + bias, keys j <= i) v, computed BLOCK_ROWS queries at a time.

    q: (B, H, T, dh); k, v: (B, Hkv, T, dh); bias: (B or 1, H, T, T), the value at masked pairs unused
    -> (B, H, T, dh).
    """
    length = q.shape[-2]
    masked = torch.finfo(q.dtype).min
    positions = torch.arange(length, device=q.device)
    outputs = []
    for start, rows in zip(range(0, length, BLOCK_ROWS), bias.split(BLOCK_ROWS, dim=-2)):
        end = start + rows.shape[-2]
        allowed = positions[start:end, None] >= positions[None, :end]  # (rows, end)
        block_bias = torch.where(allowed, rows[..., :end].to(q.dtype), masked).contiguous()
        outputs.append(F.scaled_dot_product_attention(
            q[:, :, start:end], k[:, :, :end], v[:, :, :end], attn_mask=block_bias, scale=scale,
            dropout_p=dropout, enable_gqa=k.shape[1] != q.shape[1],
        ))
    return torch.cat(outputs, dim=-2)
