"""Absolute encodings, added once to the token embeddings: none (NoPE), sinusoidal, learned."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from posformer.positions.contract import PositionEncoding
from posformer.positions.frequencies import frequencies
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes
from posformer.utils.tensor_checks import check_values

SINUSOIDAL_LAYOUTS = ("interleaved", "half")


def sinusoidal_angles_to_table(angles: Tensor, layout: str) -> Tensor:
    """angles: (..., dim/2) -> (..., dim) as sin/cos pairs ("interleaved") or [sin | cos] ("half")."""
    sin, cos = angles.sin(), angles.cos()
    if layout == "interleaved":
        return torch.stack((sin, cos), dim=-1).flatten(-2)
    return torch.cat((sin, cos), dim=-1)


def sinusoidal_table(n_positions: int, dim: int, base: float = 10000.0, layout: str = "interleaved") -> Tensor:
    """The table of "Attention Is All You Need", section 3.5: (n_positions, dim) float32.

    PE[pos, 2i] = sin(pos / base^(2i/dim)) and PE[pos, 2i+1] = cos(pos / base^(2i/dim));
    with layout="half" the sines fill the first dim/2 columns and the cosines the rest.
    """
    if dim % 2:
        raise ValueError(f"sinusoidal_table: dim={dim} must be even")
    pos = torch.arange(n_positions, dtype=torch.float32)
    return sinusoidal_angles_to_table(pos[:, None] * frequencies(dim, base), layout)


@register("none")
class NoPosition(PositionEncoding):
    """NoPE: no position information at all (a causal mask still orders a decoder)."""


@register("sinusoidal")
class Sinusoidal(PositionEncoding):
    """Fixed sinusoids added to the embeddings; `base` (N) and `layout` configurable. Any length."""

    defaults = {"base": 10000.0, "layout": "interleaved"}
    inv_freq: Tensor  # (d_model/2,) buffer

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        if params["layout"] not in SINUSOIDAL_LAYOUTS:
            raise cls.param_error(cls.name, "layout", params["layout"], f"one of {SINUSOIDAL_LAYOUTS}")
        if not isinstance(params["base"], (int, float)) or params["base"] <= 1:
            raise cls.param_error(cls.name, "base", params["base"], "a number > 1")
        if sizes.d_model % 2:
            raise ValueError(f"Config.d_model={sizes.d_model} must be even for position='sinusoidal'")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.register_buffer("inv_freq", frequencies(sizes.d_model, float(self.params["base"])), persistent=False)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        angles = pos[..., None].to(torch.float32) * self.inv_freq  # (B, T, d/2)
        return x + sinusoidal_angles_to_table(angles, self.params["layout"]).to(x.dtype)


@register("learned")
class Learned(PositionEncoding):
    """A trained table of `Config.max_positions` vectors (BERT, GPT-2). Cannot go past its length.

    Position p reads row p + `offset`; RoBERTa reserves rows 0 .. padding_idx, so its
    offset is padding_idx + 1 (= 2) and its first token reads row 2.
    """

    defaults = {"offset": 0}
    extrapolates = False

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        limit = sizes.max_positions
        cls.require_int(params, "offset", 0, limit, f"an integer in [0, max_positions={limit})")

    @classmethod
    def max_length(cls, params: Mapping[str, Any], max_positions: int) -> int:
        """The rows after the reserved `offset` ones: max_positions - offset."""
        return max_positions - int(params["offset"])

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.offset = int(self.params["offset"])
        self.table = nn.Embedding(sizes.max_positions, sizes.d_model)

    def check_positions(self, pos: Tensor) -> None:
        super().check_positions(pos)
        usable = self.table.num_embeddings - self.offset  # = max_length(params, max_positions)
        check_values(
            (pos < usable).all(),
            f"position_ids reach beyond the learned position table of {usable} "
            f"positions (Config.max_positions={self.table.num_embeddings}, offset {self.offset}); "
            f"'learned' cannot extrapolate: shorten the input or use an encoding such as 'rope' or "
            f"'sinusoidal'",
            lambda: f"position {int(pos.max())}",
        )

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        added: Tensor = self.table(pos + self.offset if self.offset else pos)  # (B, T, d_model)
        return x + added
