"""`Sizes`: what an encoding needs to know of the model it serves, so that it can be built without a `Config`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """The model's sizes an encoding reads.

    d_model: the hidden size; n_heads, head_dim: the query heads and their width; max_positions: the longest
    position a table of positions or distances holds; scale: the attention scale (a bias that mimics a q.k term
    multiplies by it); norm_eps, dropout, init_std: for the encodings with a norm, a dropout or random weights.
    """

    d_model: int
    n_heads: int
    head_dim: int
    max_positions: int = 2048
    scale: float | None = None
    norm_eps: float = 1e-5
    dropout: float = 0.0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "head_dim", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Sizes.{name}={value!r} is invalid: expected an integer >= 1")
        if self.scale is None:
            object.__setattr__(self, "scale", self.head_dim**-0.5)
