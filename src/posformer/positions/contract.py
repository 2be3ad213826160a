"""The position-encoding contract: the hooks every encoding may override and the capabilities some declare.

This module is the whole contract between an encoding and the rest of the model (docs/positions.md, "The
contract"). Nothing outside `positions/` imports an encoding's own module: the model asks this contract.

Hooks (`PositionEncoding`; each a no-op unless overridden; the stack and `SelfAttention` call them):

- `embed(x, pos)`: added to the token embeddings once (absolute encodings).
- `rotate(q, k, q_pos, k_pos, layer)`: applied to q and k in every layer (rotary).
- `bias(q, k, q_pos, k_pos, layer)`: added to the attention logits (declared by `adds_bias`).
- `values(probs, q_pos, k_pos, layer)`: added to the attention output (declared by `adds_values`).

Which attention an encoding needs is declared once, by `attention` (an `AttentionKind`): softmax with the
bias and values hooks, softmax with a bias from terms of the hidden states (`ReadsHidden`), or the encoding's
own weights instead of softmax (`ReplacesSoftmax`); `SelfAttention` dispatches on it once, when it is built.
How FlexAttention takes the bias is declared by `flex_form`.

Capabilities: members that some encodings have and the model asks for with `isinstance` on the Protocol
declared here: `ReadsHidden`, `ReplacesSoftmax`, `ForgetsKeys`, `GoesStale`, `Rescalable`, `OwnAttnScale`,
`SchemeInitialised`, `Saturating`. An encoding takes one by defining its members.

Positions are always explicit integer tensors, never a loop counter, so KV-cached decoding and left padding
are correct for every encoding.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from torch import Tensor, nn

from posformer.ops.flex import ScoreMod
from posformer.positions.distance_table import DistanceTable
from posformer.positions.params import ParameterRules, PositionParams
from posformer.positions.per_forward import PerForward
from posformer.positions.sizes import Sizes
from posformer.utils.tensor_checks import check_values


class AttentionKind(enum.Enum):
    """The attention an encoding needs; `SelfAttention` builds the matching strategy (`modules.position_attention`).

    SOFTMAX: softmax(scale * q.k + bias) v (+ the values term): the `bias` and `values` hooks; under
      FlexAttention, the bias as a `score_mod`.
    HIDDEN_TERMS: softmax with a bias computed from per-token terms of the attention's input (`ReadsHidden`:
      FoX, PaTH); the KV cache keeps the keys' terms.
    OWN_WEIGHTS: the encoding's own weights of the keys instead of softmax (`ReplacesSoftmax`: stick-breaking).
    """

    SOFTMAX = "softmax"
    HIDDEN_TERMS = "hidden_terms"
    OWN_WEIGHTS = "own_weights"


class PositionEncoding(ParameterRules, DistanceTable, PerForward, nn.Module):
    """Base class of every position encoding.

    One instance serves the layers of one stack (the encoder or the decoder) that share its position settings:
    all of them, or those of some `Config.layer_types`; it is built with `n_layers`, their number, and hooks
    that keep per-layer parameters index them with `layer`, counted among those layers.

    Class attributes a subclass sets (the declarations the model reads; the conformance suite checks each one
    against the hooks the class defines):
      name: the registry name.
      defaults: the accepted `Config.position_params` and their default values
        (`resolve_params` is the one place that combines them with a config's).
      attention: the attention the encoding needs (`AttentionKind`).
      adds_bias: True when the encoding adds an attention bias (the `bias` hook, or `terms_bias` of `ReadsHidden`).
      adds_values: True when it adds a term to the attention output (the `values` hook).
      sdpa_compatible: False when the encoding needs the attention probabilities themselves (the `values`
        hook) or weighs the keys itself (`AttentionKind.OWN_WEIGHTS`), which forces the eager path.
      flex_form: how FlexAttention (`Config.attn_impl="flex"`) takes the bias: "distance_table" (the encoding
        overrides `distance_bias`, which `score_mod` reads as a table), "score_mod" (it overrides `score_mod`,
        or `terms_score_mod` of `ReadsHidden`), None (no form: FlexAttention refuses a bias, naming
        `flex_refusal`).
      flex_refusal: why FlexAttention cannot take the encoding (`Config` names it when refusing attn_impl="flex").
      extrapolates: False when positions past `Config.max_positions` cannot be
        represented (a table indexed by position or distance); `check_positions`
        then raises a clear error instead of failing inside an embedding lookup.
      causal_only: True when the encoding is defined for causal attention alone (it counts the keys before
        each query): `Config` then refuses any arch but "decoder".
      compiles_whole: False when a tensor's shape depends on the positions' values
        (a table sliced to the distances that occur), so that `torch.compile`
        breaks its graph there, once per forward; True: one graph per forward.
      packing_refusal: why packed documents (`document_ids`) cannot use the encoding; None when they can.
      cpu_bias_block_bytes: the bytes of one block's float32 bias on the CPU when the bias is computed in
        blocks of queries (`modules.bias_blocks`), None for the default: an encoding whose every block pays for
        a table of every distance of the sequence asks for larger blocks, which share that cost.
    And one per instance:
      position_axes: how many axes of position ids the hooks read: 1, ids (B, T), for every encoding but M-RoPE
        (`rope` with an `mrope_section`), which reads 3, ids (3, B, T) (temporal, height, width), and also
        takes (B, T) ids as all three axes alike. `check_position_ids` refuses more axes than an encoding reads.

    What the hooks lean on lives beside this file: how the parameters are resolved and checked
    (`params.ParameterRules`: `resolve_params`, `check_config`, `max_length`, `for_lengths`, `param_error`,
    ...), the values a forward computes once for all layers (`per_forward.PerForward`: `forward_scope`,
    `per_forward`, `memo_snapshot`, `memo_restored`), and the FlexAttention table
    (`distance_table.DistanceTable`: `distance_bias`, `score_mod`).
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    attention: ClassVar[AttentionKind] = AttentionKind.SOFTMAX
    adds_bias: ClassVar[bool] = False
    adds_values: ClassVar[bool] = False
    sdpa_compatible: ClassVar[bool] = True
    flex_form: ClassVar[Literal["distance_table", "score_mod"] | None] = None
    flex_refusal: ClassVar[str] = "its bias has no FlexAttention form (no score_mod)"
    extrapolates: ClassVar[bool] = True
    causal_only: ClassVar[bool] = False
    compiles_whole: ClassVar[bool] = True
    packing_refusal: ClassVar[str | None] = None
    cpu_bias_block_bytes: ClassVar[int | None] = None
    position_axes: int = 1

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
        """Whether FlexAttention can take the whole encoding: no values term, softmax weights, and no attention
        bias at all or one it can add as a `score_mod` (`flex_form`)."""
        return cls.flex_unfit() is None

    @classmethod
    def flex_unfit(cls) -> str | None:
        """Why FlexAttention cannot take the encoding, or None when it can (`flex_compatible`)."""
        if cls.adds_values:
            return "its values term needs the attention probabilities"
        if cls.attention is AttentionKind.OWN_WEIGHTS or (cls.adds_bias and cls.flex_form is None):
            return cls.flex_refusal
        return None

    def check_position_ids(self, pos: Tensor) -> None:
        """Raise `ValueError` when the encoding cannot read `pos`: ids with axes, (3, B, T), when it reads one
        position per token (`position_axes`), or positions it cannot represent (`check_positions`)."""
        if pos.dim() == 3 and self.position_axes == 1:
            raise ValueError(
                f"position_ids of shape {tuple(pos.shape)} have axes (multi-axis, M-RoPE); position={self.name!r} "
                "reads one position per token, (batch, length): multi-axis ids need position='rope' with "
                "position_params['mrope_section']"
            )
        self.check_positions(pos)

    def check_positions(self, pos: Tensor) -> None:
        """Raise `ValueError` when `pos` (B, T), or (3, B, T) for an encoding that reads axes, holds positions this
        encoding cannot represent."""
        check_values((pos >= 0).all(), "position_ids must be >= 0", lambda: f"minimum {int(pos.min())}")

    # ----------------------------------------------------------------- hooks
    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """x: (B, T, d_model), pos: (B, T) -> (B, T, d_model)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """q: (B, H, Tq, dh), k: (B, Hkv, Tk, dh), q_pos: (B, Tq), k_pos: (B, Tk) -> (q, k)."""
        return q, k

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor | None:
        """q: (B, H, Tq, dh), k: (B, Hkv, Tk, dh) -> additive logits (B or 1, H, Tq, Tk), or None. An encoding
        that overrides it declares `adds_bias = True`.

        The bias is added after the attention scale: logits = scale * q.k + bias. In a causal stack the
        pairs with k_pos > q_pos are masked, and the bias there may be any finite value.

        q and q_pos may be a block of the queries and k, k_pos the keys up to the block's last query: a bias too
        large to hold whole is asked for one block at a time (`modules.bias_blocks`), so the bias is a function
        of the positions (and vectors) given, and what it computes for the block must not grow with the whole
        length (no (Tq, Tk) table of every pair, no (Tk, Tk) scores of the keys).
        """
        return None

    def values(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor | None:
        """probs: (B, H, Tq, Tk) -> a term (B, H, Tq, dh) added to the attention output, or None. An encoding
        that overrides it declares `adds_values = True` and `sdpa_compatible = False`."""
        return None

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.params.items())


@runtime_checkable
class ReadsHidden(Protocol):
    """`AttentionKind.HIDDEN_TERMS`: a bias that depends on each token's hidden state, through per-token terms.

    Implemented by FoX (`fox`, `fox_per_row`) and PaTH; called by `SelfAttention` (through
    `modules.position_attention.HiddenTermsAttention`), and the KV cache keeps the key terms beside the keys.

    `token_terms(x, layer)`: x (B, T, d_model), the attention's input -> (query terms (B, H, T, dq) or None, key
    terms (B, H, T, dk)), in float32 or wider.
    `terms_bias(q_terms, k_terms, q_index, layer, q, k)`: the terms of Tq queries and of the first Tk keys, with
    each query's index among the keys, q_index (Tq,), and those queries and keys themselves, q (B, H, Tq, dh) and
    k (B, Hkv, Tk, dh) as the attention scores them (an encoding that transforms the score reads them: PaTH) -> the
    bias (B, H, Tq, Tk); `terms_score_mod` (the terms of the whole queries and keys) gives it as a FlexAttention
    score_mod, or None when it has none.
    `shared_key_work(k_terms, k, layer)`: the key terms (B, H, S, dk) and keys (B, Hkv, S, dh) of every key -> the
    work on the keys that the bias of every block of queries reads (PaTH: each key carried to its chunk's end and
    each chunk's transform), a tuple of tensors, or None; computed once per attention call and handed to
    `terms_bias` as `shared`, so that blocks of queries do not each redo it. `terms_bias` computes it itself when
    `shared` is None.
    """

    def token_terms(self, x: Tensor, layer: int) -> tuple[Tensor | None, Tensor]: ...

    def shared_key_work(self, k_terms: Tensor, k: Tensor, layer: int) -> tuple[Tensor, ...] | None: ...

    def terms_bias(
        self,
        q_terms: Tensor | None,
        k_terms: Tensor,
        q_index: Tensor,
        layer: int,
        q: Tensor,
        k: Tensor,
        shared: tuple[Tensor, ...] | None = None,
    ) -> Tensor: ...

    def terms_score_mod(
        self, q_terms: Tensor | None, k_terms: Tensor, q_index: Tensor, layer: int
    ) -> ScoreMod | None: ...


@runtime_checkable
class ReplacesSoftmax(Protocol):
    """`AttentionKind.OWN_WEIGHTS`: attention weights that are not softmax(scores + bias).

    Implemented by stick-breaking; called by `SelfAttention` (through `modules.position_attention.OwnWeightsAttention`
    and `ops.weighted_attention`), one block of queries at a time.

    `key_weights(scores, seen, q_index, layer)`: scores (B, H, Tq, Tk) scaled q.k of a block of queries, seen
    (Tq, Tk) or broadcastable bool, which keys each query may see, q_index (Tq,) each query's index among the keys
    -> the weights (B, H, Tq, Tk) that multiply the values.
    """

    def key_weights(self, scores: Tensor, seen: Tensor, q_index: Tensor, layer: int) -> Tensor: ...


@runtime_checkable
class ForgetsKeys(Protocol):
    """Some cached keys are never seen again, so that a KV cache may drop them.

    Implemented by StreamingLLM (`streaming`); called by `Stack.keys_kept`, which the KV cache uses to evict.

    `keys_seen(k_pos, q_pos)`: k_pos (B, S) the positions of the cached keys, q_pos (B, T) those of the next
    queries -> (B, S) bool, whether any query at q_pos or later (positions only grow) may still see each key.
    """

    def keys_seen(self, k_pos: Tensor, q_pos: Tensor) -> Tensor: ...


@runtime_checkable
class GoesStale(Protocol):
    """Keys cached at short lengths stop matching a longer forward.

    Implemented by RoPE (under LongRoPE and dynamic YaRN scalings); called by `Stack.stale_beyond` and
    `Stack.stale_at`, which generation asks before it reuses its cache.

    `stale_beyond()` is the longest length L0 up to which cached keys stay valid, or None when they never go
    stale; `stale_at(L)` says whether a forward whose largest position is L - 1 finds the keys cached by
    shorter forwards stale: LongRoPE at L = L0 + 1 only (it switches once), dynamic YaRN at every L > L0 (its
    frequencies follow L). Generation then runs the whole sequence again.
    """

    def stale_beyond(self) -> int | None: ...

    def stale_at(self, length: int) -> bool: ...


@runtime_checkable
class Rescalable(Protocol):
    """A context-extension method extends it past its trained length (RoPE's linear, ntk, yarn, ...).

    Implemented by RoPE (`rope`); called on the encoding class by the extrapolation and extension experiments
    (`isinstance(positions.get(name), Rescalable)`).

    `scalings` names its methods; `rescaled_params(params, kind, new_len, trained_len)` gives its parameters
    extended by method `kind` from trained_len to new_len tokens.
    """

    scalings: ClassVar[tuple[str, ...]]

    @classmethod
    def rescaled_params(
        cls, params: Mapping[str, Any], kind: str, new_len: int, trained_len: int
    ) -> PositionParams: ...


@runtime_checkable
class OwnAttnScale(Protocol):
    """The paper scales the attention otherwise than 1/sqrt(head_dim).

    Implemented by DeBERTa; called on the encoding class by `Config.scale`, which takes
    `default_attn_scale(params, head_dim)` (a float) when `Config.attn_scale` is None.
    """

    @classmethod
    def default_attn_scale(cls, params: Mapping[str, Any], head_dim: int) -> float: ...


@runtime_checkable
class SchemeInitialised(Protocol):
    """The paper initialises the encoding's weights otherwise under a `Config.init` scheme.

    Implemented by T5's table (under "t5"); called by `modules.init` as `init_weights_(scheme)` after the
    "normal" draw.
    """

    def init_weights_(self, scheme: str) -> None: ...


@runtime_checkable
class Saturating(Protocol):
    """The `distance_bias` stops changing past `saturation_distance` (an int, T5's max_distance).

    Implemented by T5; read by the figure of a learned bias (`plots.t5_learned`), which draws such encodings a
    little past that distance.
    """

    @property
    def saturation_distance(self) -> int: ...
