"""The linear layer of every posformer model: `F.linear`, with few rows spread over the CPU's threads.

On the CPU the BLAS (MKL) runs a product of one row (a decoding step at batch 1) by an (out, in)
weight on one thread however many torch has, and uses the threads poorly for a few rows.
`linear` then splits the weight's output rows into blocks, a few per thread, views of the weight
(no copy), and multiplies them as one batched product, which the BLAS spreads over the threads.
Measured on this project's 2-core machine, GPT-2 small's 48 projections, 2 threads: one row
18.1 ms on 1 or 2 threads, 11.1 ms split; 8 rows 34.2 ms on 1 thread, 23.4 ms on 2, 18.0 ms
split; 64 rows 66.9 -> 60.4 ms; at 256 rows and more the plain product is faster. The split is
taken only without autograd (inference, generation): training runs the plain product and its
usual backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SPLIT_MAX_ROWS = 64
"""The most rows (tokens) a product may have for its output features to be split over the threads."""

SPLIT_MIN_FEATURES = 16
"""The fewest output features a block of the split may hold; narrower layers run the plain product."""

BLOCKS_PER_THREAD = 8
"""Blocks per thread: smaller blocks balance the threads better (GPT-2 small's 49 products, 2 threads:
8 rows 30.8 ms with 2 blocks, 27.2 ms with 16; 2 rows 27.8 -> 23.2 ms; 1 row level)."""


def thread_blocks(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> int:
    """How many blocks `linear` splits `weight`'s output rows into for input `x`: 1 means the plain product
    (also for any input `F.linear` would refuse, so that its error is the one raised)."""
    if torch.compiler.is_compiling():  # first: torch.get_num_threads() would break the graph
        return 1
    threads = torch.get_num_threads()
    if threads < 2 or x.device.type != "cpu" or weight.dim() != 2 or not weight.is_contiguous():
        return 1
    if x.dim() == 0 or x.shape[-1] != weight.shape[1] or x.dtype != weight.dtype:
        return 1
    if bias is not None and (bias.shape != weight.shape[:1] or bias.dtype != weight.dtype):
        return 1
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return 1
    if x.numel() > SPLIT_MAX_ROWS * weight.shape[1]:
        return 1
    return max(1, min(threads * BLOCKS_PER_THREAD, weight.shape[0] // SPLIT_MIN_FEATURES))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias, as `F.linear`. x: (..., in); weight: (out, in); bias: (out,) or None -> (..., out)."""
    blocks = thread_blocks(x, weight, bias)
    if blocks == 1:
        return F.linear(x, weight, bias)
    out_features, in_features = weight.shape
    rows = x.reshape(-1, in_features)
    even = out_features - out_features % blocks
    stacked = weight[:even].view(blocks, even // blocks, in_features).transpose(1, 2)
    y = torch.bmm(rows.expand(blocks, *rows.shape), stacked).transpose(0, 1).reshape(rows.shape[0], even)
    if even < out_features:
        y = torch.cat((y, F.linear(rows, weight[even:])), dim=-1)
    if bias is not None:
        y = y + bias
    return y.view(*x.shape[:-1], out_features)


class Linear(nn.Linear):
    """`nn.Linear` (same parameters, same state-dict keys) whose forward is `linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
