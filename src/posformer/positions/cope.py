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
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posformer.positions.base import PositionEncoding
from posformer.positions.registry import register


@register("cope")
class ContextualPosition(PositionEncoding):
    """Gated, cumulative, fractional positions with learned vectors. position_params: npos_max."""

    defaults = {"npos_max": 64}
    causal_only = True

    @classmethod
    def check_config(cls, cfg) -> None:
        cls.require_int(cfg, "npos_max", 2, expected="an integer >= 2 (the largest count is npos_max - 1)")

    def __init__(self, cfg, causal: bool, n_layers: int) -> None:
        super().__init__(cfg, causal, n_layers)
        self.npos_max = self.params["npos_max"]
        self.table = nn.Parameter(torch.randn(n_layers, cfg.head_dim, self.npos_max) * cfg.init_std)

    def counts(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """p_ij: (B, H, Tq, Tk) float32, the gated number of keys from key j to query i, at most npos_max - 1."""
        repeat = q.shape[1] // k.shape[1]
        if repeat > 1:
            k = k.repeat_interleave(repeat, dim=1)
        gates = torch.sigmoid(self.scale * torch.matmul(q.float(), k.float().transpose(-1, -2)))
        before = k_pos[:, None, None, :] <= q_pos[:, None, :, None]  # (B or 1, 1, Tq, Tk)
        gates = gates * before
        return gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.npos_max - 1)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """-> q_i . e[p_ij], interpolated: (B, H, Tq, Tk) float32."""
        counts = self.counts(q, k, q_pos, k_pos)
        at_integers = torch.matmul(q.float(), self.table[layer].float())  # (B, H, Tq, npos_max)
        low = counts.floor()
        weight = counts - low
        below = at_integers.gather(-1, low.long())
        above = at_integers.gather(-1, counts.ceil().long())
        return below + weight * (above - below)
