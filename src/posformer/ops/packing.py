"""`TokenPacking`: run the per-token layers of a padded batch on its real tokens only.

Everything in a Transformer layer but the attention kernel acts on each token alone: the
norms, the q/k/v and output projections, the feed-forward network, dropout and the residual
sums. On a padded batch (B, T) with N real tokens, those layers can run on an (N, d) matrix
instead of (B, T, d), which skips the padding's share of the matmuls (about a fifth of a
SQuAD batch cut to its longest window). Only attention needs the (B, T) layout: its
projections are unpacked before the kernel and packed again after it. This is the
"unpadding" of ModernBERT (Warner et al. 2024) and MosaicBERT, here for every position
encoding, because the encodings act inside the padded layout exactly as before.

The hidden states of the real tokens are the same as without packing; those at padded
positions come back as zeros (they were never defined: a padded query's output depends on
the batch it was padded in).
"""

from __future__ import annotations

import torch
from torch import Tensor


class TokenPacking:
    """The real tokens of a padded batch. keep: (B, T) bool, True for a real token."""

    def __init__(self, keep: Tensor) -> None:
        self.batch, self.length = keep.shape
        self.index = keep.reshape(-1).nonzero().squeeze(1)  # (N,) flat positions of the real tokens

    @classmethod
    def of(cls, keep: Tensor | None) -> TokenPacking | None:
        """A packing for `keep` (B, T) bool, or None when there is no padding to skip."""
        if keep is None or bool(keep.all()):
            return None
        return cls(keep)

    @property
    def tokens(self) -> int:
        """N, the number of real tokens."""
        return int(self.index.numel())

    def pack(self, x: Tensor) -> Tensor:
        """(B, T, ...) -> (N, ...): the rows of the real tokens, in batch-major order."""
        return _TakeRows.apply(x.reshape(self.batch * self.length, *x.shape[2:]), self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """(N, ...) -> (B, T, ...), zeros at the padded positions."""
        return _PlaceRows.apply(x, self.index, self.batch * self.length).unflatten(0, (self.batch, self.length))


def _place(rows: Tensor, index: Tensor, total: int) -> Tensor:
    """(N, ...) rows put at `index` (N,) distinct positions of a zero (total, ...) tensor."""
    return rows.new_zeros(total, *rows.shape[1:]).index_copy_(0, index, rows)


class _TakeRows(torch.autograd.Function):
    """x[index] along dim 0 for distinct indices. Autograd's own backward of index_select accumulates with
    index_add_ (it must allow repeated indices), several times slower on the CPU than the copy that
    distinct indices allow."""

    @staticmethod
    def forward(ctx, x: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(index)
        ctx.total = x.shape[0]
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (index,) = ctx.saved_tensors
        return _place(grad, index, ctx.total), None


class _PlaceRows(torch.autograd.Function):
    """The inverse of `_TakeRows`: rows placed at distinct indices of a zero tensor; the gradient is taken back."""

    @staticmethod
    def forward(ctx, rows: Tensor, index: Tensor, total: int) -> Tensor:
        ctx.save_for_backward(index)
        return _place(rows, index, total)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (index,) = ctx.saved_tensors
        return grad.index_select(0, index), None, None


def take_rows(x: Tensor, index: Tensor) -> Tensor:
    """x[index] along dim 0 for distinct indices: x (M, ...), index (N,) -> (N, ...); the gradient goes back
    with a copy to those rows, not autograd's accumulating `index_add_`."""
    return _TakeRows.apply(x, index)
