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

import copy
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn

from posformer.ops.flex import ScoreMod
from posformer.utils.tensor_checks import check_values
from posformer.utils.validation import is_int, is_number

if TYPE_CHECKING:
    from posformer.config import Config

Result = TypeVar("Result")


def batch_rows(pos: Tensor) -> Tensor:
    """pos: (B, T) -> (1, T) when every row is one row repeated by construction (stride 0 over the batch,
    as the default position ids), else pos itself. What is computed from that row broadcasts over the
    batch; telling this costs no host synchronisation."""
    return pos[:1] if pos.dim() == 2 and pos.shape[0] > 1 and pos.stride(0) == 0 else pos


class PositionParams(dict):
    """The resolved parameters of one encoding: its class defaults with the config's values on top.

    It remembers the encoding it belongs to (`encoding`), so that a config whose
    `position` changes (a preset with `position=` overridden, `Config.replace`,
    `dataclasses.replace`) starts from the new encoding's defaults instead of
    carrying parameters the new encoding does not have. A plain dict carries no
    such tag and is checked strictly.
    """

    def __init__(self, encoding: str, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self.encoding = encoding

    def __reduce__(self) -> tuple:
        return type(self), (self.encoding, dict(self))

    def __deepcopy__(self, memo: dict) -> "PositionParams":
        return type(self)(self.encoding, copy.deepcopy(dict(self), memo))


class PositionEncoding(nn.Module):
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
      scalings: the context-extension methods `rescaled_params` applies (RoPE's
        linear / ntk / ...); empty when the encoding has none.
      causal_only: True when the encoding is defined for causal attention alone (it counts the keys before
        each query): `Config` then refuses any arch but "decoder".
      compiles_whole: False when a tensor's shape depends on the positions' values
        (a table sliced to the distances that occur), so that `torch.compile`
        breaks its graph there, once per forward; True: one graph per forward.

    An encoding whose bias depends on the distance alone also overrides `distance_bias`;
    `score_mod` then hands that bias to FlexAttention (`Config.attn_impl="flex"`) as a table.
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    sdpa_compatible: ClassVar[bool] = True
    extrapolates: ClassVar[bool] = True
    scalings: ClassVar[tuple[str, ...]] = ()
    causal_only: ClassVar[bool] = False
    compiles_whole: ClassVar[bool] = True

    def __init__(self, cfg: "Config", causal: bool, n_layers: int) -> None:
        super().__init__()
        self.params = dict(type(self).resolve_params(cfg.position_params))
        self.causal = causal
        self.n_layers = n_layers
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.d_model = cfg.d_model
        self.scale = cfg.scale  # the attention scale: a bias hook that mimics a q.k term multiplies by it
        self._per_forward: dict[Hashable, tuple[Tensor, Tensor, Any]] | None = None

    # ------------------------------------------------------------ parameters
    @classmethod
    def resolve_params(cls, given: Mapping[str, Any]) -> PositionParams:
        """This encoding's parameters: `defaults` with `given` on top, as a `PositionParams`.

        `given` tagged for another encoding (a `PositionParams` of, say, a preset's
        rope) is dropped: the encoding starts from its own defaults. Unknown keys
        of an untagged mapping raise `ValueError` naming them.
        """
        if isinstance(given, PositionParams) and given.encoding != cls.name:
            given = {}
        unknown = sorted(set(given) - set(cls.defaults))
        if unknown:
            allowed = ", ".join(sorted(cls.defaults)) or "none"
            raise ValueError(
                f"Config.position_params has unknown key(s) {unknown} for position={cls.name!r}: "
                f"allowed keys are {allowed}"
            )
        for key, value in given.items():
            cls._check_param_kind(key, value)
        return PositionParams(cls.name, copy.deepcopy({**cls.defaults, **given}))

    @classmethod
    def _check_param_kind(cls, key: str, value: Any) -> None:
        """`value` has the kind of the parameter's default: a bool for a bool, an integer for an integer, a finite
        number for a float, a string for a string (None and container defaults are checked by `check_config`)."""
        default = cls.defaults[key]
        if isinstance(default, bool):
            ok, expected = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, expected = is_int(value), "an integer"
        elif isinstance(default, float):
            ok, expected = is_number(value), "a finite number"
        elif isinstance(default, str):
            ok, expected = isinstance(value, str), "a string"
        else:
            return
        if not ok:
            raise cls.param_error(cls.name, key, value, expected)

    @classmethod
    def check_config(cls, cfg: "Config") -> None:
        """Raise `ValueError` naming the parameter or field when `cfg` cannot use this encoding.

        `cfg.position_params` is already resolved (`resolve_params`): every key is present.
        """

    @classmethod
    def max_length(cls, cfg: "Config") -> int | None:
        """The longest sequence `cfg`'s encoding can represent, or None when any length works."""
        return None

    @classmethod
    def rescaled_params(cls, params: Mapping[str, Any], kind: str, new_len: int, trained_len: int) -> PositionParams:
        """`params` extended by the method `kind` (one of `scalings`) to read `new_len` tokens
        after training at `trained_len`. Raises `ValueError` when this encoding has no such method."""
        raise ValueError(
            f"position={cls.name!r} has no context-extension method {kind!r}; "
            f"its methods: {', '.join(cls.scalings) or 'none'}"
        )

    @classmethod
    def default_attn_scale(cls, cfg: "Config") -> float | None:
        """The attention scale this encoding's paper uses when `Config.attn_scale` is None.

        None means the usual 1/sqrt(head_dim).
        """
        return None

    @staticmethod
    def param_error(name: str, key: str, value: Any, expected: str) -> ValueError:
        return ValueError(
            f"Config.position_params[{key!r}]={value!r} is invalid for position={name!r}: expected {expected}"
        )

    @classmethod
    def require_int(cls, cfg: "Config", key: str, low: int, high: int | None = None, expected: str = "") -> int:
        """`cfg.position_params[key]` when it is an integer in [low, high); else a `param_error` saying `expected`."""
        value = cfg.position_params[key]
        if not is_int(value) or value < low or (high is not None and value >= high):
            raise cls.param_error(cls.name, key, value, expected)
        return value

    @torch.no_grad()
    def init_weights_(self, scheme: str) -> None:
        """Re-draw this encoding's parameters for `Config.init` = `scheme`, after the "normal" draw.

        The default keeps the "normal" draw; an encoding whose paper initialises it
        otherwise under that scheme overrides this (T5's bias table under "t5").
        """

    def distance_bias(self, rel: Tensor, layer: int = 0) -> Tensor | None:
        """rel: (R,) relative distances key_pos - query_pos -> the bias (H, R) the encoding adds at them,
        for encodings whose bias depends on distance alone; None for the others."""
        return None

    @classmethod
    def flex_compatible(cls) -> bool:
        """Whether FlexAttention can take the whole encoding: no attention bias at all, or one that depends on
        the distance alone (`distance_bias`); and no values term (`sdpa_compatible`)."""
        return cls.sdpa_compatible and (
            cls.bias is PositionEncoding.bias or cls.distance_bias is not PositionEncoding.distance_bias
        )

    def score_mod(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> ScoreMod | None:
        """This encoding's bias as a FlexAttention `score_mod` (score, b, h, q_idx, kv_idx) -> score + bias, or
        None when it adds none. Reads `distance_bias` over the distances these positions span, (H, R),
        built once per forward and layer; q_pos (B or 1, Tq), k_pos (B or 1, Tk)."""
        if type(self).distance_bias is PositionEncoding.distance_bias:
            return None
        low, table = self.per_forward(
            ("score_table", layer), q_pos, k_pos, lambda q_rows, k_rows: self._score_table(q_rows, k_rows, layer)
        )
        q_rows, k_rows = batch_rows(q_pos), batch_rows(k_pos)
        q_one, k_one = q_rows.shape[0] == 1, k_rows.shape[0] == 1

        def add_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            rel = k_rows[0 if k_one else b, kv_idx] - q_rows[0 if q_one else b, q_idx]
            return score + table[h, rel - low].to(score.dtype)

        return add_bias

    def _score_table(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[int, Tensor]:
        """(low, table): the distances key - query from low to the largest that occurs, and their bias (H, R)."""
        low = int(k_pos.min()) - int(q_pos.max())
        high = int(k_pos.max()) - int(q_pos.min())
        table = self.distance_bias(torch.arange(low, high + 1, device=q_pos.device), layer)
        # contiguous: training T5 (whose table is a transposed view) through FlexAttention on an H100 took 23x
        # the time of no encoding with the view, 1.3x with a contiguous copy
        return low, table.contiguous()

    def stale_beyond(self) -> int | None:
        """A length L0 such that keys cached while every length was <= L0 no longer match what a forward at a
        longer length computes (LongRoPE's switch to its long factors); None when cached keys never go stale.
        Generation runs the whole sequence again once, when the length first exceeds L0."""
        return None

    @property
    def saturation_distance(self) -> int | None:
        """The distance past which `distance_bias` stops changing (T5's max_distance), or None."""
        return None

    def check_positions(self, pos: Tensor) -> None:
        """Raise `ValueError` when `pos` (B, T) holds positions this encoding cannot represent."""
        check_values((pos >= 0).all(), "position_ids must be >= 0", lambda: f"minimum {int(pos.min())}")

    # ------------------------------------------------------ shared by the layers
    @contextmanager
    def forward_scope(self) -> Iterator[None]:
        """One forward of the stack: inside it, `per_forward` computes each value once for all layers."""
        outer, self._per_forward = self._per_forward, {}
        try:
            yield
        finally:
            self._per_forward = outer

    def per_forward(
        self, key: Hashable, q_pos: Tensor, k_pos: Tensor, compute: Callable[[Tensor, Tensor], Result]
    ) -> Result:
        """compute(q_pos, k_pos), once per stack forward for each `key` (say, a table shared by the layers).

        Inside `forward_scope`, a later call with the same key and the same position tensors (the stack
        hands the same ones to every layer; recognised by identity) returns the first result; outside it,
        every call computes. Positions that repeat one row over the batch reach `compute` as that row,
        (1, T), so that a table of positions is computed once, not once per row.
        """
        memo = self._per_forward
        if memo is not None:
            hit = memo.get(key)
            if hit is not None and hit[0] is q_pos and hit[1] is k_pos:
                return hit[2]
        q_rows = batch_rows(q_pos)
        value = compute(q_rows, q_rows if k_pos is q_pos else batch_rows(k_pos))
        if memo is not None:
            memo[key] = (q_pos, k_pos, value)
        return value

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
        """
        return None

    def values(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor | None:
        """probs: (B, H, Tq, Tk) -> a term (B, H, Tq, dh) added to the attention output, or None."""
        return None

    @property
    def uses_values(self) -> bool:
        return type(self).values is not PositionEncoding.values

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.params.items())


def frequencies(dim: int, base: float, device: torch.device | None = None) -> Tensor:
    """The inverse frequencies base^(-2i/dim) for i in [0, dim/2): (dim/2,) float32."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
