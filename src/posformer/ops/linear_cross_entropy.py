"""The language-model head and its cross-entropy in one pass over row chunks, without the (N, V) logits.

Training only needs the loss, but the usual path writes every position's logits
(N, V), then in the backward a gradient of the same size: with GPT-2's vocabulary,
batch 8 x 1024 tokens, 1.6 GB each. Here the rows are taken a chunk at a time:
the chunk's logits, their log-sum-exp, and at once the gradient softmax - one_hot,
multiplied into the gradients of the hidden states and of the head's weight and
bias. Only those gradients (the sizes of the inputs) wait for the backward, which
scales them by the incoming gradient. Without autograd the chunks compute the loss
alone.

On the CPU in eager mode the rows whose label is ignored are dropped first, so a
masked-LM batch (most labels -100) projects only its masked tokens. Elsewhere (an
accelerator, `torch.compile`) every row is computed and the ignored ones weigh 0:
selecting rows would wait for the device or break the graph.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from posformer.ops.cross_entropy import check_token_labels

CHUNK_ELEMENTS = 2**24  # logits per chunk (64 MiB in float32) ...
MIN_CHUNK_ROWS = 512  # ... but never fewer rows: each chunk adds into the whole weight gradient


def chunk_rows(vocab: int) -> int:
    """Rows per chunk for a vocabulary of `vocab`: CHUNK_ELEMENTS // vocab, at least MIN_CHUNK_ROWS."""
    return max(MIN_CHUNK_ROWS, CHUNK_ELEMENTS // vocab)


def linear_token_cross_entropy(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, labels: Tensor, ignore_index: int
) -> Tensor:
    """sum over rows i with labels[i] != ignore_index of logsumexp(z[i]) - z[i, labels[i]], z = hidden @ weight.T
    + bias, with z never held whole.

    hidden: (N, d); weight: (V, d); bias: (V,) or None; labels: (N,) int64 -> a float32 scalar (float64 when
    the product is float64). Under autocast the products run in its dtype, as `F.linear` would; the softmax in
    float32 or wider. Gradients reach hidden, weight and bias.
    """
    check_token_labels(labels, hidden.shape[0], weight.shape[0], ignore_index)
    keep = labels != ignore_index
    if hidden.device.type == "cpu" and not torch.compiler.is_compiling():
        rows = keep.nonzero().squeeze(1)
        hidden, labels, keep = hidden.index_select(0, rows), labels.index_select(0, rows), keep[rows]
    targets = labels.masked_fill(~keep, 0)
    params = (hidden, weight) if bias is None else (hidden, weight, bias)
    if torch.is_grad_enabled() and any(p.requires_grad for p in params):
        return LinearTokenCrossEntropy.apply(hidden, weight, bias, targets, keep)
    return _chunked(hidden, weight, bias, targets, keep, gradients=False)[0]


class LinearTokenCrossEntropy(torch.autograd.Function):
    """The summed loss of `linear_token_cross_entropy` over rows already chosen; `keep` (N,) bool weighs each row
    (False: 0), `targets` (N,) hold a valid class in every row. The gradients are computed in the forward."""

    @staticmethod
    def forward(
        ctx: FunctionCtx, hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, keep: Tensor
    ) -> Tensor:
        loss, grads = _chunked(hidden, weight, bias, targets, keep, gradients=True)
        ctx.save_for_backward(*grads)
        ctx.has_bias = bias is not None
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad_hidden, grad_weight, *grad_bias = ctx.saved_tensors
        scaled = [g * grad.to(g.dtype) for g in (grad_hidden, grad_weight, *grad_bias)]
        return scaled[0], scaled[1], scaled[2] if ctx.has_bias else None, None, None


def _compute_dtype(hidden: Tensor) -> torch.dtype:
    """The dtype `F.linear` would multiply in: autocast's where it is on for hidden's device, else hidden's."""
    device = hidden.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype


def _chunked(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, keep: Tensor, gradients: bool
) -> tuple[Tensor, list[Tensor]]:
    """(summed loss, [grad hidden (N, d), grad weight (V, d), grad bias (V,) if any]) chunk by chunk; the
    gradients are those of the loss itself (scale 1), and empty without `gradients`."""
    dtype = _compute_dtype(hidden)
    wide = torch.promote_types(dtype, torch.float32)
    with torch.autocast(hidden.device.type, enabled=False):
        w = weight.to(dtype)
        b = None if bias is None else bias.to(dtype)
        loss = torch.zeros((), dtype=wide, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if gradients else None
        grad_weight = torch.zeros(weight.shape, dtype=wide, device=weight.device) if gradients else None
        grad_bias = torch.zeros(w.shape[0], dtype=wide, device=weight.device) if gradients and b is not None else None
        step = chunk_rows(weight.shape[0])
        for start in range(0, hidden.shape[0], step):
            rows = slice(start, start + step)
            h, y, weigh = hidden[rows].to(dtype), targets[rows, None], keep[rows, None].to(wide)
            logits = (h @ w.t() if b is None else torch.addmm(b, h, w.t())).to(wide)
            lse = torch.logsumexp(logits, dim=-1, keepdim=True)
            loss += ((lse - logits.gather(1, y)) * weigh).sum()
            if not gradients:
                continue
            grad_logits = logits.sub_(lse).exp_().mul_(weigh)
            grad_logits.scatter_add_(1, y, -weigh)
            grad_logits = grad_logits.to(dtype)
            grad_hidden[rows] = grad_logits @ w
            if dtype == wide:
                grad_weight.addmm_(grad_logits.t(), h)
            else:  # a product in the narrow dtype, summed over chunks in float32
                grad_weight += grad_logits.t() @ h
            if grad_bias is not None:
                grad_bias += grad_logits.sum(0)
    if not gradients:
        return loss, []
    grads = [grad_hidden, grad_weight.to(weight.dtype)]
    return loss, grads if grad_bias is None else [*grads, grad_bias.to(bias.dtype)]
