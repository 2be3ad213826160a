"""The position-encoding contract: four hooks, each a no-op unless overridden.

Position information enters a Transformer in one of four places. An encoding
is one class that overrides only the hooks it uses:

- `embed(x, pos)`: added to the token embeddings once (absolute encodings).
- `rotate(q, k, q_pos, k_pos, layer)`: applied to q and k in every layer (rotary).
- `bias(q, k, q_pos, k_pos, layer)`: added to the attention logits.
- `values(probs, q_pos, k_pos, layer)`: added to the attention output.

Positions are always explicit integer tensors, never a loop counter, so
KV-cached decoding and left padding are correct for every encoding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posformer.positions.distance_table import DistanceTable
from posformer.positions.params import ParameterRules
from posformer.positions.per_forward import PerForward
from posformer.positions.sizes import Sizes
from posformer.utils.tensor_checks import check_values


class PositionEncoding(ParameterRules, DistanceTable, PerForward, nn.Module):
    """Base class of every position encoding.

    One instance serves the layers of one stack (the encoder or the decoder) that share its position settings:
    all of them, or those of some `Config.layer_types`; it is built with `n_layers`, their number, and hooks
    that keep per-layer parameters index them with `layer`, counted among those layers.

    Class attributes a subclass sets:
      name: the registry name.
      defaults: the accepted `Config.position_params` and their default values
        (`resolve_params` is the one place that combines them with a config's).
      sdpa_compatible: False when the encoding needs the attention
        probabilities themselves (the `values` hook), which forces the eager path.
      extrapolates: False when positions past `Config.max_positions` cannot be
        represented (a table indexed by position or distance); `check_positions`
        then raises a clear error instead of failing inside an embedding lookup.
      causal_only: True when the encoding is defined for causal attention alone (it counts the keys before
        each query): `Config` then refuses any arch but "decoder".
      compiles_whole: False when a tensor's shape depends on the positions' values
        (a table sliced to the distances that occur), so that `torch.compile`
        breaks its graph there, once per forward; True: one graph per forward.
      flex_refusal: why FlexAttention cannot take the bias, for an encoding with a bias and no `score_mod`
        (`Config` names it when refusing attn_impl="flex").
      packing_refusal: why packed documents (`document_ids`) cannot use the encoding; None when they can.

    An encoding with a bias gives FlexAttention (`Config.attn_impl="flex"`) its form there, `score_mod`: one
    whose bias depends on the distance alone overrides `distance_bias`, which `score_mod` reads as a table; any
    other overrides `score_mod` itself.

    What the hooks lean on lives beside this file: how the parameters are resolved and checked
    (`params.ParameterRules`: `resolve_params`, `check_config`, `max_length`, `param_error`, ...), the values a
    forward computes once for all layers (`per_forward.PerForward`), and the FlexAttention table
    (`distance_table.DistanceTable`: `distance_bias`, `score_mod`).

    A hook that one encoding alone needs is not declared here but in that encoding's file, as a runtime-checkable
    `typing.Protocol` that its callers test with `isinstance` (RoPE's `rotary.Rescalable` and `rotary.GoesStale`,
    T5's `t5.Saturating`, ...); another encoding takes the hook by defining the same member.
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    sdpa_compatible: ClassVar[bool] = True
    extrapolates: ClassVar[bool] = True
    causal_only: ClassVar[bool] = False
    compiles_whole: ClassVar[bool] = True
    flex_refusal: ClassVar[str] = "its bias has no FlexAttention form (no score_mod)"
    packing_refusal: ClassVar[str | None] = None
    # the bytes of one block's float32 bias on the CPU when the bias is computed in blocks of queries
    # (`modules.bias_blocks`), None for the default: an encoding whose every block pays for a table of every
    # distance of the sequence asks for larger blocks, which share that cost
    cpu_bias_block_bytes: ClassVar[int | None] = None

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__()
        self.params = dict(type(self).resolve_params(params or {}))
        self.causal = causal
        self.n_layers = n_layers
        self.n_heads = sizes.n_heads
        self.head_dim = sizes.head_dim
        self.d_model = sizes.d_model
        self.scale = sizes.scale  # the attention scale: a bias hook that mimics a q.k term multiplies by it

    @classmethod
    def flex_compatible(cls) -> bool:
        """Whether FlexAttention can take the whole encoding: no values term (`sdpa_compatible`), and no attention
        bias at all or one it can add as a `score_mod` (a `distance_bias`, or a `score_mod` of its own)."""
        return cls.flex_unfit() is None

    @classmethod
    def flex_unfit(cls) -> str | None:
        """Why FlexAttention cannot take the encoding, or None when it can (`flex_compatible`)."""
        if not cls.sdpa_compatible:
            return "its values term needs the attention probabilities"
        if cls.bias is PositionEncoding.bias or cls.distance_bias is not DistanceTable.distance_bias:
            return None
        return None if cls.score_mod is not DistanceTable.score_mod else cls.flex_refusal

    def check_positions(self, pos: Tensor) -> None:
        """Raise `ValueError` when `pos` (B, T) holds positions this encoding cannot represent."""
        check_values((pos >= 0).all(), "position_ids must be >= 0", lambda: f"minimum {int(pos.min())}")

    # ----------------------------------------------------------------- hooks
    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """x: (B, T, d_model), pos: (B, T) -> (B, T, d_model)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """q: (B, H, Tq, dh), k: (B, Hkv, Tk, dh), q_pos: (B, Tq), k_pos: (B, Tk) -> (q, k)."""
        return q, k

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor | None:
        """q: (B, H, Tq, dh), k: (B, Hkv, Tk, dh) -> additive logits (B or 1, H, Tq, Tk), or None.

        The bias is added after the attention scale: logits = scale * q.k + bias. In a causal stack the
        pairs with k_pos > q_pos are masked, and the bias there may be any finite value.

        q and q_pos may be a block of the queries and k, k_pos the keys up to the block's last query: a bias too
        large to hold whole is asked for one block at a time (`modules.bias_blocks`), so the bias is a function
        of the positions (and vectors) given, and what it computes for the block must not grow with the whole
        length (no (Tq, Tk) table of every pair, no (Tk, Tk) scores of the keys).
        """
        return None

    def values(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor | None:
        """probs: (B, H, Tq, Tk) -> a term (B, H, Tq, dh) added to the attention output, or None."""
        return None

    @classmethod
    def has_bias(cls) -> bool:
        """Whether the encoding adds an attention bias (defines the `bias` hook)."""
        return cls.bias is not PositionEncoding.bias

    @property
    def uses_bias(self) -> bool:
        return self.has_bias()

    @property
    def uses_values(self) -> bool:
        return type(self).values is not PositionEncoding.values

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.params.items())


def frequencies(dim: int, base: float, device: torch.device | None = None) -> Tensor:
    """The inverse frequencies base^(-2i/dim) for i in [0, dim/2): (dim/2,) float32."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
