"""Causal attention on the CPU, one block of queries at a time.

With a bias, SDPA cannot be told `is_causal`: the causal order travels in the
mask, and the kernel computes every (query, key) pair, the half that the mask
then throws away included. A bias that needs a gradient (T5, KERPLE, FIRE, the
q.r encodings) even sends SDPA to its math path, which materialises the whole
(B, H, T, T) scores and softmax. Cut into blocks of `BLOCK_ROWS` queries, block
b attends only to the keys up to its last query, so the pairs past it are never
computed: (n + 1) / 2n of the work for n blocks, and scores small enough to stay
in cache. Measured on 2 threads (B=4, H=8, T=512, dh=64, forward and backward):
a learned bias 79-80 ms whole, 38 ms in blocks of 128 rows; a fixed bias 42 ms
whole, 32 ms in blocks.

Without a bias, SDPA's CPU flash kernel skips the masked pairs only a whole tile
of 512 keys at a time, so below about 768 keys it skips little or nothing. There
blocks pay too (B=8, same heads, three runs each): 53-55 ms against 44-46 at
T=384, 94-98 against 74-75 at T=512, 126-131 against 111-114 at T=640; at T=768
the kernel's 71-75 ms beat the blocks' 73-77, hence `NO_BIAS_MAX_LENGTH`.

Every block reads its rows of the one bias; the rows are taken with `split`,
whose backward concatenates, and not with a slice per block, whose backward
would allocate a whole (T, T) gradient per block.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer.ops.masks import causal_allowed

BLOCK_ROWS = 128
NO_BIAS_MAX_LENGTH = 640


def use_causal_blocks(q: Tensor, bias: Tensor | None, is_causal: bool) -> bool:
    """Whether `causal_blocks_attention` should run: a plain causal mask on the CPU, more than one block of
    queries and, without a bias, at most NO_BIAS_MAX_LENGTH of them. (CUDA's fused kernels skip masked tiles
    and take a bias with its gradient; `flex` skips blocks.)"""
    length = q.shape[-2]
    if not is_causal or q.device.type != "cpu" or length <= BLOCK_ROWS:
        return False
    return bias is not None or length <= NO_BIAS_MAX_LENGTH


def query_blocks(
    length: int, bias: Tensor | None, dtype: torch.dtype, device: torch.device
) -> Iterator[tuple[int, int, Tensor]]:
    """Each block of BLOCK_ROWS queries, [start, end), with its mask over the keys [0, end): the bias rows with
    every masked pair at `dtype`'s most negative value, (B or 1, H, rows, end) in `dtype` and contiguous; or,
    without a bias, True where a pair is allowed, (rows, end) bool."""
    bias_rows = None if bias is None else bias.split(BLOCK_ROWS, dim=-2)
    for block, start in enumerate(range(0, length, BLOCK_ROWS)):
        end = min(start + BLOCK_ROWS, length)
        allowed = causal_allowed(end - start, end, device)  # the block's queries are the last of these keys
        if bias_rows is None:
            yield start, end, allowed
        else:
            yield (
                start,
                end,
                torch.where(allowed, bias_rows[block][..., :end].to(dtype), torch.finfo(dtype).min).contiguous(),
            )


def causal_blocks_attention(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, scale: float, dropout: float
) -> Tensor:
    """softmax(scale * q.k + bias, keys j <= i) v through SDPA, BLOCK_ROWS queries at a time.

    q: (B, H, T, dh); k, v: (B, Hkv, T, dh); bias: (B or 1, H, T, T), the value at masked pairs unused,
    or None -> (B, H, T, dh).
    """
    outputs = [
        F.scaled_dot_product_attention(
            q[:, :, start:end],
            k[:, :, :end],
            v[:, :, :end],
            attn_mask=mask,
            scale=scale,
            dropout_p=dropout,
            enable_gqa=k.shape[1] != q.shape[1],
        )
        for start, end, mask in query_blocks(q.shape[-2], bias, q.dtype, q.device)
    ]
    return torch.cat(outputs, dim=-2)
