"""Summed token cross-entropy over a vocabulary as one autograd node, computed in float32 or wider.

`F.cross_entropy` writes the (N, V) log-probabilities in the forward and, in the
backward, a zero-filled (N, V) gradient that it scatters into before the
log-softmax backward reads both. Here the forward keeps only the log-sum-exp per
row (N,), and the backward writes the gradient softmax - one_hot in one
softmax and one scaling pass: two full passes over the logits fewer, and no
(N, V) tensor saved between forward and backward besides the logits themselves.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from posformer.utils.tensor_checks import check_in_range


class TokenCrossEntropy(torch.autograd.Function):
    """sum over rows i with labels[i] != ignore_index of logsumexp(logits[i]) - logits[i, labels[i]].

    logits: (N, V) floating point; labels: (N,) int64 -> a scalar in float32 (float64 for float64
    logits). The gradient reaches the logits, in their dtype.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, logits: Tensor, labels: Tensor, ignore_index: int) -> Tensor:
        scores = logits.to(torch.promote_types(logits.dtype, torch.float32))
        keep = labels != ignore_index
        targets = labels.masked_fill(~keep, 0)
        target_scores = scores.gather(1, targets[:, None]).squeeze(1)
        ctx.save_for_backward(logits, targets, keep)
        return ((torch.logsumexp(scores, dim=-1) - target_scores) * keep).sum()

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None, None]:
        logits, targets, keep = ctx.saved_tensors
        wide = torch.promote_types(logits.dtype, torch.float32)
        row_grad = (grad * keep).to(wide)[:, None]  # (N, 1)
        grad_logits = torch.softmax(logits, dim=-1, dtype=wide).mul_(row_grad)
        grad_logits.scatter_add_(1, targets[:, None], -row_grad)
        return grad_logits.to(logits.dtype), None, None


def token_cross_entropy(logits: Tensor, labels: Tensor, ignore_index: int) -> Tensor:
    """The summed cross-entropy of `TokenCrossEntropy`; logits: (N, V), labels: (N,) -> scalar."""
    check_token_labels(labels, logits.shape[0], logits.shape[1], ignore_index)
    return TokenCrossEntropy.apply(logits, labels, ignore_index)


def check_token_labels(labels: Tensor, rows: int, vocab: int, ignore_index: int) -> None:
    """Raise `ValueError` unless labels has shape (rows,) and every value lies in [0, vocab) or is ignore_index."""
    if labels.shape != (rows,):
        raise ValueError(f"labels has shape {tuple(labels.shape)}; expected ({rows},)")
    check_in_range(labels, 0, vocab, f"labels must lie in [0, {vocab}) or be {ignore_index}", allowed=ignore_index)
