"""Shaw et al. 2018, "Self-Attention with Relative Position Representations".

Each layer l learns two tables of 2k + 1 vectors of size head_dim, a^K_l and
a^V_l, indexed by the clipped distance from query i to key j:

    idx(i, j) = clip(j - i, -k, k) + k                 (k = `max_distance`)
    e_ij = scale * (q_i . k_j + q_i . a^K_l[idx(i, j)])          (paper eq. 5)
    z_i  = sum_j alpha_ij (v_j + a^V_l[idx(i, j)])               (paper eq. 3)

The key-side term is the `bias` hook (times `scale`, since the paper adds it
inside the scaled product); the value-side term sum_j alpha_ij a^V_l[idx(i, j)]
is the `values` hook, so this encoding runs on the eager attention path. All
distances beyond k share one vector, so any length works. Both terms go through
the 2k + 1 bins of each query (`clipped_bins`): q_i is scored against the table
once, and the probabilities that share a bin are summed before the table is.

Parameters: `key[l].weight` and `value[l].weight`, each (2k + 1, head_dim).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from posformer.positions.clipped_bins import ClippedBins
from posformer.positions.contract import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.relative_scores import counts_up, relative_distance
from posformer.positions.sizes import Sizes


@register("shaw")
class Shaw(PositionEncoding):
    """Clipped relative key and value vectors, per layer. Any length."""

    adds_bias = True
    adds_values = True

    defaults = {"max_distance": 16}
    sdpa_compatible = False

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        cls.require_int(params, "max_distance", 1, expected="a positive integer (the clipping distance k)")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.max_distance = int(self.params["max_distance"])
        size = 2 * self.max_distance + 1
        self.key = nn.ModuleList(nn.Embedding(size, sizes.head_dim) for _ in range(n_layers))
        self.value = nn.ModuleList(nn.Embedding(size, sizes.head_dim) for _ in range(n_layers))

    def bins(self, q_pos: Tensor, k_pos: Tensor) -> ClippedBins:
        """idx(i, j) = clip(j - i, -k, k) + k, (B or 1, Tq, Tk) in [0, 2k], and whether the positions count up
        (read on the host, except under `torch.compile`); computed once per forward."""
        return self.per_forward("bins", q_pos, k_pos, self._bins)

    def _bins(self, q_pos: Tensor, k_pos: Tensor) -> ClippedBins:
        k = self.max_distance
        index = (-relative_distance(q_pos, k_pos)).clamp(-k, k) + k
        if torch.compiler.is_compiling() or not (counts_up(q_pos) and counts_up(k_pos)):
            return ClippedBins(k, index, None)
        return ClippedBins(k, index, int(k_pos[0, 0]) - int(q_pos[0, 0]))

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """scale * q_i . a^K[idx(i, j)]: (B, H, Tq, Tk)."""
        table = self.key[layer].weight
        per_bin = torch.matmul(q * self.scale, table.transpose(0, 1).to(q.dtype))  # (B, H, Tq, 2k + 1)
        return self.bins(q_pos, k_pos).lookup(per_bin)

    def values(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """sum_j probs_ij a^V[idx(i, j)]: (B, H, Tq, head_dim)."""
        per_bin = self.bins(q_pos, k_pos).sums(probs)  # (B, H, Tq, 2k + 1)
        return torch.matmul(per_bin, self.value[layer].weight.to(probs.dtype))
