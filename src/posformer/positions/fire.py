"""FIRE, functional interpolation for relative positions (Li et al. 2023, "Functional
Interpolation for Relative Positions Improves Long Context Transformers", ICLR 2024).

A small MLP of a normalised, log-compressed distance gives one bias per head:

    logits[b, h, i, j] = scale * q_i . k_j + f_theta( psi(|i - j|) / psi(max(L, i)) )[h]
    psi(x) = log(c * x + 1)

with i = q_pos[b, i] and j = k_pos[b, j] (positions, not indices). Learned:
c > 0 (used as |c|, init `init_c`), the threshold L = |L_mult| * init_L (L_mult
init 1, so L starts at `init_L`, 512 in the paper), and f_theta: 1 -> mlp_width
-> n_heads with a ReLU. Progressive interpolation: in a causal stack the input
of f_theta lies in [0, 1] at every attended pair (0 <= i - j <= i <= max(L, i)),
whatever the length. The encoder (bidirectional) form uses |i - j|, which can
exceed 1 once a key lies beyond max(L, i). The causal form uses |i - j| too:
equal to i - j wherever attention is allowed, and finite (so gradients stay
finite) at masked pairs. A small eps (1e-6) keeps the denominator positive, as
in the paper's reference code.

`shared=True` (default): one FIRE for the whole stack (the paper notes that
sharing across layers works and is cheaper); `shared=False`: one per layer.
The MLP weights are plain parameters initialised as PyTorch's `nn.Linear`
default (uniform in +-1/sqrt(fan_in)), the paper code's init; the model-wide
normal init of `nn.Linear` layers does not touch them.

Through FlexAttention (`score_mod`) the MLP runs inside the kernel, one hidden unit after another, on
psi(|i - j|) from a table of the distances that occur divided by psi(max(L, i)) per query: O(T) tensors, and
mlp_width multiply-adds per pair and head.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posformer.ops.flex import ScoreMod
from posformer.positions.contract import PositionEncoding
from posformer.positions.pair_scores import distance_span
from posformer.positions.per_forward import batch_rows
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes

EPS = 1e-6


@register("fire")
class FIRE(PositionEncoding):
    """f_theta(psi(|i - j|) / psi(max(L, i))), psi(x) = log(c x + 1); learned c, L, f_theta. Any length."""

    adds_bias = True
    flex_form = "score_mod"

    defaults: ClassVar[dict[str, Any]] = {"mlp_width": 32, "init_c": 0.1, "init_L": 512.0, "shared": True}

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        width = params["mlp_width"]
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise cls.param_error(cls.name, "mlp_width", width, "a positive integer")
        for key in ("init_c", "init_L"):
            value = params[key]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise cls.param_error(cls.name, key, value, "a number > 0")
        if not isinstance(params["shared"], bool):
            raise cls.param_error(cls.name, "shared", params["shared"], "True or False")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        groups = 1 if self.params["shared"] else n_layers
        width, heads = int(self.params["mlp_width"]), sizes.n_heads
        self.register_buffer("init_L", torch.tensor(float(self.params["init_L"])), persistent=False)
        self.c = nn.Parameter(torch.full((groups,), float(self.params["init_c"])))
        self.L_mult = nn.Parameter(torch.ones(groups))
        self.w1 = nn.Parameter(torch.empty(groups, width))  # f_theta layer 1: (groups, width), fan_in 1
        self.b1 = nn.Parameter(torch.empty(groups, width))
        self.w2 = nn.Parameter(torch.empty(groups, width, heads))  # layer 2: (groups, width, H)
        self.b2 = nn.Parameter(torch.empty(groups, heads))
        with torch.no_grad():
            for tensor, fan_in in ((self.w1, 1), (self.b1, 1), (self.w2, width), (self.b2, width)):
                bound = 1.0 / math.sqrt(fan_in)
                tensor.uniform_(-bound, bound)

    def group(self, layer: int) -> int:
        return 0 if self.params["shared"] else layer

    def mlp(self, x: Tensor, layer: int) -> Tensor:
        """f_theta of `layer`: x (...) -> (..., H)."""
        g = self.group(layer)
        x = x.to(self.w1.dtype)
        hidden = torch.relu(x[..., None] * self.w1[g] + self.b1[g])
        return hidden @ self.w2[g] + self.b2[g]

    def normalized_distance(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """psi(|i - j|) / psi(max(L, i)): q_pos (B, Tq), k_pos (B, Tk) -> (B, Tq, Tk) float32."""
        i = q_pos.to(torch.float32)
        distance = (i[:, :, None] - k_pos[:, None, :].to(torch.float32)).abs()
        return self.psi(distance, layer) / self.normalizer(q_pos, layer)[:, :, None]

    def psi(self, distance: Tensor, layer: int) -> Tensor:
        """psi(distance) = log(c * distance + 1): distance (...) float32 -> (...) float32."""
        return torch.log(self.c[self.group(layer)].abs().float() * distance + 1)

    def normalizer(self, q_pos: Tensor, layer: int) -> Tensor:
        """psi(max(L, i)) + eps: q_pos (B, Tq) -> (B, Tq) float32."""
        g = self.group(layer)
        threshold = (self.L_mult[g].float() * self.init_L.float()).abs()
        return self.psi(torch.maximum(q_pos.to(torch.float32), threshold), layer) + EPS

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """-> f_theta(normalized distance): (B or 1, H, Tq, Tk); computed once per forward for each group of
        layers that shares one FIRE (all of them by default)."""
        return self.per_forward(
            ("bias", self.group(layer)),
            q_pos,
            k_pos,
            lambda q_rows, k_rows: self.mlp(self.normalized_distance(q_rows, k_rows, layer), layer).permute(0, 3, 1, 2),
        )

    def score_mod(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> ScoreMod:
        """The bias as FlexAttention's score_mod: f_theta evaluated in the kernel, one hidden unit after another,
        on psi(|i - j|) (a (distances,) table) over psi(max(L, i)) (per query, (B, Tq))."""
        g = self.group(layer)
        low, psi, normalizer = self.per_forward(
            ("flex", g), q_pos, k_pos, lambda q_rows, k_rows: self._flex_tables(q_rows, k_rows, layer)
        )
        batch = q.shape[0]
        q_rows = (batch_rows(q_pos) - low).expand(batch, -1)  # q_rows - k_rows: a pair's distance less low
        k_rows = batch_rows(k_pos).expand(batch, -1)
        normalizer = normalizer.expand(batch, -1)
        w1, b1, w2, b2 = self.w1[g], self.b1[g], self.w2[g], self.b2[g]
        # FlexAttention's backward takes each tensor that needs a gradient indexed once in a score_mod: each hidden
        # unit's weights are tensors of their own, (H,), read at the head
        heads = w2.shape[1]
        units = [
            (w1[unit].expand(heads).clone(), b1[unit].expand(heads).clone(), w2[unit].clone())
            for unit in range(w1.shape[0])
        ]

        def add_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            x = (psi[q_rows[b, q_idx] - k_rows[b, kv_idx]] / normalizer[b, q_idx]).to(w1.dtype)
            out = b2[h]
            for weight, unit_bias, head_weights in units:
                out = out + torch.relu(x * weight[h] + unit_bias[h]) * head_weights[h]
            return score + out.to(score.dtype)

        return add_bias

    def _flex_tables(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[int, Tensor, Tensor]:
        """(low, psi, normalizer): the smallest distance i - j of a pair, psi(|d|) of each distance d from low to the
        largest, (D,) float32, and psi(max(L, i)) + eps, (B or 1, Tq) float32."""
        low, high = distance_span(q_pos, k_pos)
        distance = torch.arange(low, high + 1, device=q_pos.device).abs().to(torch.float32)
        return low, self.psi(distance, layer), self.normalizer(q_pos, layer)
