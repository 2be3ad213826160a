"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE with an exponential decay.

Pair i of q at position m is rotated as in RoPE and multiplied by zeta_i^(m / scale_base);
pair i of k at position n by the inverse, zeta_i^(-n / scale_base), where
zeta_i = (2i + 0.4 d) / (1.4 d) for i in [0, d/2) and d the rotary dimension. The score
then carries zeta_i^((m - n) / scale_base): it depends on m - n only, and decays with the
distance when m > n (causal attention).

Positions: the explicit positions are used as they are. The reference implementation
(torchscale `XPOS`) centres them on the middle of the sequence before the power to keep
zeta^(n/scale_base) near 1; the centre cancels between q and k within one pass, but it
moves as a sequence grows, so keys stored in a KV cache (rotated with their own positions
before they enter it) would no longer match the queries of later steps. Without centring
the relative property holds exactly for any mix of cached and new positions; the price is
range: zeta_0 = 2/7, so in float32 the factors stay finite (below e^87) up to positions
of about 69 * scale_base (35k with 512). float16 reaches e^11 only: about 9 * scale_base (4.5k with 512).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from posformer.positions.contract import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.rotary import Rotary, check_rotary_params, rope_cos_sin, rope_inv_freq, rotary_dim
from posformer.positions.sizes import Sizes


def xpos_zeta(dim: int) -> Tensor:
    """zeta_i = (2i + 0.4 dim) / (1.4 dim) for i in [0, dim/2): (dim/2,) float32, in [2/7, 1)."""
    return (torch.arange(0, dim, 2, dtype=torch.float32) + 0.4 * dim) / (1.4 * dim)


@register("xpos")
class XPos(PositionEncoding):
    """xPos: RoPE rotation times zeta^(m/scale_base) on q and zeta^(-n/scale_base) on k. Any length.

    Parameters: theta, layout ("interleaved" by default, as the reference), rotary_fraction
    (as in "rope") and scale_base (512).
    """

    defaults = {"theta": 10000.0, "layout": "interleaved", "rotary_fraction": 1.0, "scale_base": 512.0}

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        check_rotary_params(cls, params, sizes.head_dim)
        base = params["scale_base"]
        if not isinstance(base, (int, float)) or isinstance(base, bool) or not 1 <= base < float("inf"):
            # zeta ** (pos / scale_base) leaves float32 within a few positions when scale_base is a tiny fraction
            raise cls.param_error(cls.name, "scale_base", base, "a number >= 1 (the xPos paper: 512)")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        dim = rotary_dim(sizes.head_dim, float(self.params["rotary_fraction"]))
        self.scale_base = float(self.params["scale_base"])
        self.register_buffer("inv_freq", rope_inv_freq(dim, float(self.params["theta"]))[0], persistent=False)
        self.register_buffer("zeta", xpos_zeta(dim), persistent=False)

    def tables(self, q_pos: Tensor, k_pos: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """((cos, sin) for q, (cos, sin) for k): (B, 1, T, r/2) float32 with the xPos factors
        zeta^(+pos/scale_base) (q) and zeta^(-pos/scale_base) (k) folded in; computed once per forward."""
        return self.per_forward("tables", q_pos, k_pos, self._tables)

    def _tables(self, q_pos: Tensor, k_pos: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        tables = []
        for pos, sign in ((q_pos, 1.0), (k_pos, -1.0)):
            cos, sin = rope_cos_sin(pos, self.inv_freq)
            dtype = torch.promote_types(self.zeta.dtype, torch.float32)
            factor = self.zeta.to(dtype) ** (pos[:, None, :, None].to(dtype) * (sign / self.scale_base))
            tables.append((cos * factor, sin * factor))
        return tables[0], tables[1]

    rotate = Rotary.rotate  # the RoPE rotation, applied with this class's scaled tables
