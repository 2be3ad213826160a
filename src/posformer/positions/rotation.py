"""The RoPE rotation as one autograd node: written into one output, and its backward the inverse rotation.

Rotating a pair (x1, x2) by tables (c, s) is the linear map [[c, -s], [s, c]], so the
gradient of x is the transposed map [[c, s], [-s, c]] applied to the output's
gradient: the same rotation with s negated. Autograd through the plain formula
instead saves both halves, adds the half-size results into zero-filled full-size
buffers (one per slice) and concatenates: about a quarter of a LLaMA training
step's time outside the matmuls on the CPU (docs/speed.md).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable


def _pairs(x: Tensor, layout: str) -> tuple[Tensor, Tensor]:
    """The two members of each rotated pair: interleaved (2i, 2i+1) or half (i, i + r/2)."""
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def rotated(x: Tensor, cos: Tensor, sin: Tensor, layout: str, sign: float = 1.0) -> Tensor:
    """x with its first r = 2 * cos.shape[-1] dims rotated by (cos, sign * sin), the rest copied.

    x: (B, H, T, dh); cos, sin: (B or 1, 1, T, r/2), in x's dtype -> a new tensor shaped (and strided) as x.
    """
    r = 2 * cos.shape[-1]
    x1, x2 = _pairs(x[..., :r], layout)
    if torch.compiler.is_compiling():  # Dynamo traces no out= into a strided view; Inductor fuses this form anyway
        pairs = (x1 * cos - sign * x2 * sin, x2 * cos + sign * x1 * sin)
        turned = torch.stack(pairs, dim=-1).flatten(-2) if layout == "interleaved" else torch.cat(pairs, dim=-1)
        return torch.cat((turned, x[..., r:]), dim=-1)
    out = torch.empty_like(x)
    out1, out2 = _pairs(out[..., :r], layout)
    torch.mul(x1, cos, out=out1)
    out1.addcmul_(x2, sin, value=-sign)
    torch.mul(x2, cos, out=out2)
    out2.addcmul_(x1, sin, value=sign)
    if r < x.shape[-1]:
        out[..., r:] = x[..., r:]
    return out


class Rotation(torch.autograd.Function):
    """`rotated` with the inverse rotation as its backward; cos and sin take no gradient."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return rotated(x, cos, sin, layout)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None, None, None]:
        cos, sin = ctx.saved_tensors
        return rotated(grad, cos, sin, ctx.layout, sign=-1.0), None, None, None
