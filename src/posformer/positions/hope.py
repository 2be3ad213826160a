"""HoPE (Chen et al., ACL 2025, "HoPE: A Novel Positional Encoding Without Long-Term Decay"): RoPE keeping only
the frequencies that turn through a whole period within the trained length.

RoPE's lowest frequencies barely rotate over a training context: the paper finds that they carry the long-term
decay and the U-shaped attention that limit extrapolation, and replaces them with position-independent
components. Here pair i rotates by m * theta_i only when its wavelength 2*pi / theta_i is at most
`trained_length`; the other pairs get frequency 0 and pass unrotated, at every position. p-RoPE
(`rope`'s `frequency_fraction`) drops a fixed share of the lowest frequencies instead; HoPE's share follows
from theta and the training length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from posformer.positions.registry import register
from posformer.positions.rotary import ROPE_DEFAULTS, Rotary
from posformer.positions.sizes import Sizes


@register("hope")
class HighFrequencyRotary(Rotary):
    """RoPE whose pairs with a wavelength above `trained_length` tokens do not rotate (see the module docstring).

    Parameters: those of `rope`, and `trained_length` (int > 0, default 512): the training length L; pair i
    rotates when theta^(-2i/r) * L >= 2*pi, judged on the unscaled frequencies.
    """

    defaults = {**ROPE_DEFAULTS, "trained_length": 512}
    reads_axes = False  # its frequencies are chosen for one position per token

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        length = params["trained_length"]
        if not isinstance(length, int) or isinstance(length, bool) or length <= 0:
            raise cls.param_error(cls.name, "trained_length", length, "an integer > 0 (the training length)")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        pair = self.kept.new_tensor(range(self.rotary_dim // 2))
        unscaled = self.theta ** (-2 * pair / self.rotary_dim)
        turns = (unscaled * self.params["trained_length"] >= 2 * math.pi).float()
        self.kept.mul_(turns)
        self.inv_freq.mul_(turns)
