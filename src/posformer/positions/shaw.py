"""Shaw et al. 2018, "Self-Attention with Relative Position Representations".

Each layer l learns two tables of 2k + 1 vectors of size head_dim, a^K_l and
a^V_l, indexed by the clipped distance from query i to key j:

    idx(i, j) = clip(j - i, -k, k) + k                 (k = `max_distance`)
    e_ij = scale * (q_i . k_j + q_i . a^K_l[idx(i, j)])          (paper eq. 5)
    z_i  = sum_j alpha_ij (v_j + a^V_l[idx(i, j)])               (paper eq. 3)

The key-side term is the `bias` hook (times `scale`, since the paper adds it
inside the scaled product); the value-side term sum_j alpha_ij a^V_l[idx(i, j)]
is the `values` hook, so this encoding runs on the eager attention path. All
distances beyond k share one vector, so any length works.

Parameters: `key[l].weight` and `value[l].weight`, each (2k + 1, head_dim).
"""

from __future__ import annotations

from torch import Tensor, nn

from posformer.positions.base import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.relative_scores import (
    position_weighted_values,
    query_position_scores,
    relative_distance,
)


@register("shaw")
class Shaw(PositionEncoding):
    """Clipped relative key and value vectors, per layer. Any length."""

    defaults = {"max_distance": 16}
    sdpa_compatible = False

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        cls.require_int(cfg, "max_distance", 1, expected="a positive integer (the clipping distance k)")

    def __init__(self, cfg, causal: bool, n_layers: int) -> None:
        super().__init__(cfg, causal, n_layers)
        self.max_distance = int(self.params["max_distance"])
        size = 2 * self.max_distance + 1
        self.key = nn.ModuleList(nn.Embedding(size, cfg.head_dim) for _ in range(n_layers))
        self.value = nn.ModuleList(nn.Embedding(size, cfg.head_dim) for _ in range(n_layers))

    def index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """clip(j - i, -k, k) + k: (B or 1, Tq, Tk) in [0, 2k]; computed once per forward."""
        k = self.max_distance
        return self.per_forward("index", q_pos, k_pos, lambda q_rows, k_rows: (
            -relative_distance(q_rows, k_rows)).clamp(-k, k) + k)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """scale * q_i . a^K[idx(i, j)]: (B, H, Tq, Tk)."""
        return query_position_scores(q * self.scale, self.key[layer].weight, self.index(q_pos, k_pos))

    def values(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """sum_j probs_ij a^V[idx(i, j)]: (B, H, Tq, head_dim)."""
        return position_weighted_values(probs, self.value[layer].weight, self.index(q_pos, k_pos))
