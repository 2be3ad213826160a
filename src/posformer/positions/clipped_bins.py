"""Shaw's clipped distance bins: lookups and sums over the pairs, without scatter when the positions count up.

Pair (query i, key j) falls in bin idx_ij = k + clip(kpos_j - qpos_i, -k, k) of R = 2k + 1. Two operations
on the pairs, each the other's adjoint (so each one's gradient is the other):

    lookup  out_ij = x[i, idx_ij]                   (..., Tq, R) -> (..., Tq, Tk)   the key term, q_i . a^K[idx]
    sums    out[i, r] = sum over j with idx_ij = r  (..., Tq, Tk) -> (..., Tq, R)   the value term's weights

The lookup is a `gather`, and `scatter_add` computes the sums by adding every pair into its bin. On a GPU those
adds are atomic, and all the pairs beyond k land on a row's two end bins: thousands of adds on one address for
every query. Shaw trained 18-21x slower than no encoding on an H100 so (docs/speed.md).

When queries and keys count up by one (key j at kpos_0 + j, query i at qpos_0 + i; `shift` = kpos_0 - qpos_0),
bin r of row i is one key for 0 < r < 2k (j = i + r - k - shift) and, for the end bins, every key up to or from
that one. The sums are then those single keys, read with a `gather`, plus the two end ranges, prefix sums
in float32 or wider (`prefix_sums`): no scatter at all, forward or backward.
Under `torch.compile` (where knowing that the positions count up reads them on the host) and for positions
that do not count up, the pairs' bins are gathered and scattered as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from posformer.positions.relative_scores import gather_pairs

CHUNK = 32  # keys summed at once by `prefix_sums`


@dataclass(frozen=True)
class ClippedBins:
    """The bin of every pair. index: (B or 1, Tq, Tk) long, k + clip(kpos_j - qpos_i, -k, k); shift:
    kpos_0 - qpos_0 when queries and keys count up by one in a single row of positions, else None."""

    k: int
    index: Tensor
    shift: int | None

    def lookup(self, x: Tensor) -> Tensor:
        """out_ij = x[..., i, idx_ij]: x (B, H, Tq, R) -> (B, H, Tq, Tk)."""
        if self.shift is None:
            return gather_pairs(x, self.index)
        return _LookupByBin.apply(x, self.index, self.k, self.shift)

    def sums(self, x: Tensor) -> Tensor:
        """out[..., i, r] = sum of x[..., i, j] over the keys j in bin r: x (B, H, Tq, Tk) -> (B, H, Tq, R)."""
        if self.shift is None:
            b, h, tq, tk = x.shape
            bins = x.new_zeros(b, h, tq, 2 * self.k + 1)
            return bins.scatter_add_(-1, self.index[:, None].expand(b, h, tq, tk), x)
        return _SumsByBin.apply(x, self.index, self.k, self.shift)


def range_sums(x: Tensor, k: int, shift: int) -> Tensor:
    """Bin sums when the positions count up: x (..., Tq, Tk) -> (..., Tq, 2k + 1), in x's dtype.

    Bin r holds key at(i, r) = i + r - k - shift (when it exists); bin 0 also every key before at(i, 0), bin 2k
    every key after at(i, 2k). The sums are accumulated in float32 (or float64 for float64 x).
    """
    rows, cols = x.shape[-2:]
    lead = x.shape[:-2]
    wide = torch.promote_types(x.dtype, torch.float32)
    at = torch.arange(rows, device=x.device)[:, None] + torch.arange(-k, k + 1, device=x.device) - shift
    exact = x.gather(-1, at.clamp(0, cols - 1).expand(*lead, rows, 2 * k + 1)).to(wide) * ((at >= 0) & (at < cols))
    ends = torch.cat([at[:, :1], at[:, -1:] + 1, torch.full_like(at[:, :1], cols)], dim=-1).clamp(0, cols)
    before, up_to_last, total = prefix_sums(x, ends, wide).split(1, dim=-1)
    beyond = torch.cat([before, exact.new_zeros(*lead, rows, 2 * k - 1), total - up_to_last], dim=-1)
    return (exact + beyond).to(x.dtype)  # bins 0 and 2k take the keys beyond their exact one


def prefix_sums(x: Tensor, ends: Tensor, wide: torch.dtype) -> Tensor:
    """sum of x[..., i, :ends[i, m]]: x (..., Tq, Tk), ends (Tq, n) long in [0, Tk] -> (..., Tq, n) in `wide`.

    Whole chunks of CHUNK keys are summed at once (a running sum over the keys, `cumsum`, is a sequential loop
    on the CPU, 30x the time of a sum) and their running sum read where each prefix ends; the keys of the
    prefix's last, partial chunk are gathered.
    """
    rows, cols = x.shape[-2:]
    lead, n = x.shape[:-2], ends.shape[-1]
    whole = cols // CHUNK
    chunks = x[..., : whole * CHUNK].reshape(*lead, rows, whole, CHUNK).sum(-1, dtype=wide)
    before_chunk = F.pad(chunks.cumsum(-1), (1, 0))  # (..., Tq, whole + 1): the sum of the chunks before
    first = ends // CHUNK
    keys = first[..., None] * CHUNK + torch.arange(CHUNK, device=x.device)  # (Tq, n, CHUNK)
    tail = x.gather(-1, keys.clamp(max=cols - 1).flatten(-2).expand(*lead, rows, n * CHUNK)).to(wide)
    tail = (tail.unflatten(-1, (n, CHUNK)) * (keys < ends[..., None])).sum(-1)
    return before_chunk.gather(-1, first.expand(*lead, rows, n)) + tail


class _LookupByBin(torch.autograd.Function):
    """The lookup as a gather; its gradient, the sums of the pairs' gradients by bin, as `range_sums`."""

    @staticmethod
    def forward(ctx, x: Tensor, index: Tensor, k: int, shift: int) -> Tensor:
        ctx.k, ctx.shift = k, shift
        return gather_pairs(x, index)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:
        return range_sums(grad, ctx.k, ctx.shift), None, None, None


class _SumsByBin(torch.autograd.Function):
    """The sums as `range_sums`; their gradient, each pair reading its bin's, as a gather."""

    @staticmethod
    def forward(ctx, x: Tensor, index: Tensor, k: int, shift: int) -> Tensor:
        ctx.save_for_backward(index)
        return range_sums(x, k, shift)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (index,) = ctx.saved_tensors
        return gather_pairs(grad, index), None, None, None
