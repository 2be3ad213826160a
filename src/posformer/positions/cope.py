"""CoPE, contextual position encoding (Golovneva et al. 2024, "Contextual Position Encoding: Learning to
Count What's Important").

Positions are counted by the content: a gate g_ij = sigmoid(scale * q_i . k_j) says whether key j counts for
query i, and the position of key j seen from query i is the number of counted keys from j to i,

    p_ij = sum_{t=j..i} g_it          (fractional; clamped to npos_max - 1),

added to the logits through learned position vectors e[0..npos_max) of one head's size (one table per
layer, shared by its heads), interpolated between the integers around p_ij:

    logits[b, h, i, j] = scale * q_i . k_j + (1 - w) q_i . e[floor(p_ij)] + w q_i . e[ceil(p_ij)],
    w = p_ij - floor(p_ij)

as in the paper's code (the gates read the scaled logits; the position term uses the unscaled query). Keys
after the query (by position) count zero. The count runs over the keys from j to the query, so CoPE needs a
causal stack: arch "decoder" only. The paper's code starts the table at zero; here it is drawn from
N(0, init_std) so that the term shows from the first step. `npos_max` (default 64) caps the count, so any
length can be read.

The term is one autograd node (`CountedPositionTerm`): autograd through the formula saved and passed over
a dozen (B, H, Tq, Tk) tensors (flips, floor, ceil, gathers and their scatters); the written backward needs
one cumulative sum (the adjoint of the reversed one) and two scatters into (B, H, Tq, npos_max). A key after
the query has a shut gate, so its gradient is zero without a mask, and a count at the cap has a step of zero
above it, so its gradient is zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer.positions.contract import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes


def open_gates(logits: Tensor, before: Tensor) -> Tensor:
    """g_ij = sigmoid(logits_ij) for a key j at or before query i, else 0. logits (B, H, Tq, Tk) float32;
    before (B or 1, 1, Tq, Tk) bool -> (B, H, Tq, Tk)."""
    return torch.sigmoid(logits).mul_(before)


def count_back(gates: Tensor, cap: int) -> Tensor:
    """p_ij = sum_{t >= j} g_it, at most `cap`: gates (..., Tk) -> (..., Tk)."""
    return gates.flip(-1).cumsum(-1).flip(-1).clamp_(max=cap)


def interpolate(at_integers: Tensor, counts: Tensor) -> Tensor:
    """(1 - w) a[floor(p)] + w a[floor(p) + 1], w = p - floor(p): at_integers (B, H, Tq, P) the scores at the
    integer positions, counts (B, H, Tq, Tk) in [0, P - 1] -> (B, H, Tq, Tk)."""
    return _interpolate(at_integers, steps_between(at_integers), counts)[0]


def steps_between(at_integers: Tensor) -> Tensor:
    """a[p + 1] - a[p], and 0 at p = P - 1 (a count at the cap has no position above it): (..., P) -> (..., P)."""
    return F.pad(at_integers.diff(dim=-1), (0, 1))


def _interpolate(at_integers: Tensor, steps: Tensor, counts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`interpolate`'s value a[floor(p)] + w step[floor(p)], with what its gradient needs: w, step[floor(p)]
    and floor(p)."""
    low = counts.long()  # counts >= 0: truncation is the floor
    weight = counts.frac()
    step = steps.gather(-1, low)
    return torch.addcmul(at_integers.gather(-1, low), weight, step), weight, step, low


class CountedPositionTerm(torch.autograd.Function):
    """interpolate(at_integers, count_back(open_gates(logits, before), cap)), with its gradient written out.

    logits (B, H, Tq, Tk) float32: the gates' scaled q.k; at_integers (B, H, Tq, P) float32 and its
    `steps_between` -> (B, H, Tq, Tk). The gradient of `steps` reaches `at_integers` through autograd, on
    (B, H, Tq, P) tensors.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, at_integers: Tensor, steps: Tensor, before: Tensor, cap: int) -> Tensor:
        gates = open_gates(logits, before)
        term, weight, step, low = _interpolate(at_integers, steps, count_back(gates, cap))
        ctx.save_for_backward(gates, weight, step, low)
        ctx.positions = at_integers.shape[-1]
        return term

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
        gates, weight, step, low = ctx.saved_tensors
        shape = (*grad.shape[:-1], ctx.positions)
        grad_integers = grad.new_zeros(shape).scatter_add_(-1, low, grad)
        grad_steps = grad.new_zeros(shape).scatter_add_(-1, low, grad * weight)
        # p_ij sums g_it over t >= j, so g_it receives the gradient of every p_ij with j <= t: a cumulative sum
        through_sigmoid = (grad * step).cumsum_(-1).mul_(gates)
        grad_logits = torch.addcmul(through_sigmoid, through_sigmoid, gates, value=-1)
        return grad_logits, grad_integers, grad_steps, None, None


@register("cope")
class ContextualPosition(PositionEncoding):
    """Gated, cumulative, fractional positions with learned vectors. position_params: npos_max."""

    adds_bias = True

    defaults = {"npos_max": 64}
    causal_only = True
    flex_refusal = "its positions are counted from the attention scores (sums of gates over the keys)"
    packing_refusal = (
        "it counts the keys at or before each query by their positions, which restart in every packed document"
    )

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        cls.require_int(params, "npos_max", 2, expected="an integer >= 2 (the largest count is npos_max - 1)")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.npos_max = self.params["npos_max"]
        self.table = nn.Parameter(torch.randn(n_layers, sizes.head_dim, self.npos_max) * sizes.init_std)

    def _gate_inputs(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """The gates' logits scale * q.k (B, H, Tq, Tk) in float32 or wider and which keys are at
        or before their query."""
        repeat = q.shape[1] // k.shape[1]
        if repeat > 1:
            k = k.repeat_interleave(repeat, dim=1)
        wide = torch.promote_types(q.dtype, torch.float32)  # float32 or wider: float64 in a float64 model
        logits = torch.matmul(q.to(wide) * self.scale, k.to(wide).transpose(-1, -2))
        return logits, k_pos[:, None, None, :] <= q_pos[:, None, :, None]

    def counts(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """p_ij: (B, H, Tq, Tk) float32, the gated number of keys from key j to query i, at most npos_max - 1."""
        return count_back(open_gates(*self._gate_inputs(q, k, q_pos, k_pos)), self.npos_max - 1)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """-> q_i . e[p_ij], interpolated: (B, H, Tq, Tk) float32."""
        logits, before = self._gate_inputs(q, k, q_pos, k_pos)
        wide = logits.dtype
        at_integers = torch.matmul(q.to(wide), self.table[layer].to(wide))  # (B, H, Tq, npos_max)
        return CountedPositionTerm.apply(logits, at_integers, steps_between(at_integers), before, self.npos_max - 1)
