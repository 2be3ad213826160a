"""Rotary position embedding (RoPE, Su et al. 2021): q and k rotated by position-dependent angles.

Two layouts of the rotated pairs:
  "interleaved": dims (2i, 2i+1) form a pair, Meta LLaMA's complex form
                 (`precompute_freqs_cis` / `apply_rotary_emb`).
  "half":        dims (i, i + d/2) form a pair, Hugging Face `rotate_half`.
Only the first `rotary_fraction * head_dim` dims are rotated (GPT-NeoX partial rotary).
Context-extension scalings (linear, ntk, dynamic, yarn, dynamic_yarn, llama3, longrope) live in `rope_scaling`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor

from posformer.positions.contract import PositionEncoding
from posformer.positions.mrope import axis_of_pairs, check_section, mrope_cos_sin
from posformer.positions.params import PositionParams
from posformer.positions.registry import register
from posformer.positions.rope_scaling import LENGTH_DEPENDENT, check_scaling, fixed_up_to, scaled_inv_freq
from posformer.positions.rotation import Rotation
from posformer.positions.sizes import Sizes

ROPE_LAYOUTS = ("half", "interleaved")
# The parameters of RoPE that every rotary encoding shares (`rope` adds M-RoPE's axes to them).
ROPE_DEFAULTS: dict[str, Any] = {
    "theta": 10000.0,
    "layout": "half",
    "rotary_fraction": 1.0,
    "scaling": None,
    "frequency_fraction": 1.0,
    "mrope_section": None,
    "mrope_interleaved": False,
}


def rope_inv_freq(
    dim: int, base: float = 10000.0, scaling: dict[str, Any] | None = None, seq_len: int | None = None
) -> tuple[Tensor, float]:
    """The inverse frequencies of RoPE with an optional context-extension scaling.

    dim: the rotary dimension (even); base: theta; scaling: None or a dict
    {"type": one of linear, ntk, dynamic, yarn, dynamic_yarn, llama3, longrope, "factor": ..., <the type's keys>}
    (see `posformer.positions.rope_scaling`); seq_len: the current length (largest
    position + 1), used by "dynamic", "dynamic_yarn" and "longrope" only (None: as at initialisation).

    Returns `(inv_freq, attention_factor)`:
      inv_freq: (dim/2,) float32 on the CPU; pair i of a vector at position m is
        rotated by the angle m * inv_freq[i]. Unscaled, inv_freq[i] = base^(-2i/dim).
      attention_factor: a Python float by which cos and sin are multiplied (so q.k is
        multiplied by its square); 1.0 for every type except "yarn", "dynamic_yarn" and "longrope".
    Equal to Hugging Face `ROPE_INIT_FUNCTIONS[type](config, device, seq_len)` for linear,
    dynamic, yarn, llama3 and longrope. Raises `ValueError` naming the offending key.
    """
    if dim <= 0 or dim % 2:
        raise ValueError(f"rope_inv_freq: rotary dim={dim} must be even and > 0")
    check_scaling(scaling, dim)
    return scaled_inv_freq(dim, float(base), scaling, seq_len)


def rotary_dim(head_dim: int, fraction: float) -> int:
    return int(head_dim * fraction)


def check_rotary_params(cls: type[PositionEncoding], params: Mapping[str, Any], head_dim: int) -> int:
    """Validate theta, layout and rotary_fraction of a rotary encoding of heads of `head_dim`; return its rotary
    dimension."""
    if params["layout"] not in ROPE_LAYOUTS:
        raise cls.param_error(cls.name, "layout", params["layout"], f"one of {ROPE_LAYOUTS}")
    theta = params["theta"]
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 1:
        raise cls.param_error(cls.name, "theta", theta, "a number > 1")
    fraction = params["rotary_fraction"]
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction <= 1:
        raise cls.param_error(cls.name, "rotary_fraction", fraction, "a number in (0, 1]")
    dim = rotary_dim(head_dim, fraction)
    if dim == 0 or dim % 2:
        raise cls.param_error(
            cls.name,
            "rotary_fraction",
            fraction,
            f"a fraction giving an even, non-zero rotary dimension (head_dim={head_dim} "
            f"* {fraction} = {head_dim * fraction:g})",
        )
    return dim


def check_rope_params(cls: type[PositionEncoding], params: Mapping[str, Any], head_dim: int) -> int:
    """Validate the parameters of `rope` (theta, layout, rotary_fraction, scaling, frequency_fraction) of an
    encoding `cls` that takes them, for heads of `head_dim`; return the rotary dimension."""
    dim = check_rotary_params(cls, params, head_dim)
    check_scaling(params["scaling"], dim, "Config.position_params['scaling']")
    p = params["frequency_fraction"]
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
        raise cls.param_error(cls.name, "frequency_fraction", p, "a number in [0, 1] (p-RoPE's p)")
    if not isinstance(params["mrope_interleaved"], bool):
        raise cls.param_error(cls.name, "mrope_interleaved", params["mrope_interleaved"], "True or False")
    if params["mrope_section"] is not None:
        check_mrope_params(cls, params, dim)
    return dim


def check_mrope_params(cls: type[PositionEncoding], params: Mapping[str, Any], dim: int) -> None:
    """An `mrope_section` only on an encoding that reads ids with axes (`rope`), summing to half the rotary width
    `dim`, and no scaling that depends on the length (which one axis would give it?)."""
    if not getattr(cls, "reads_axes", False):
        raise cls.param_error(
            cls.name, "mrope_section", params["mrope_section"], "None: M-RoPE's axes are position='rope''s"
        )
    check_section(params["mrope_section"], dim // 2, "Config.position_params['mrope_section']")
    scaling = params["scaling"]
    if scaling is not None and scaling["type"] in LENGTH_DEPENDENT:
        raise cls.param_error(
            cls.name, "scaling", scaling, f"none of {', '.join(LENGTH_DEPENDENT)} with mrope_section (M-RoPE)"
        )


def rope_frequencies(head_dim: int, params: Mapping[str, Any]) -> tuple[int, Tensor, Tensor, float]:
    """What `rope`'s checked parameters give heads of `head_dim`: (r, kept, inv_freq, attention_factor) with r the
    rotary dimension, kept (r/2,) float32 1 for the pairs that rotate (p-RoPE's `frequency_fraction`) and 0 for
    the others, inv_freq (r/2,) the inverse frequencies times kept, and the scaling's attention factor (as at
    initialisation, for a scaling that depends on the length)."""
    dim = rotary_dim(head_dim, float(params["rotary_fraction"]))
    scaling = None if params["scaling"] is None else dict(params["scaling"])
    kept = (torch.arange(dim // 2) < math.floor(float(params["frequency_fraction"]) * dim / 2)).float()
    inv_freq, factor = rope_inv_freq(dim, float(params["theta"]), scaling)
    return dim, kept, inv_freq * kept, factor


def rope_cos_sin(pos: Tensor, inv_freq: Tensor, factor: float = 1.0) -> tuple[Tensor, Tensor]:
    """pos: (B, T), inv_freq: (r/2,) -> factor * cos, factor * sin of the angles: (B, 1, T, r/2).

    Float32 (float64 when inv_freq is float64, as after `.double()`), whatever the model's dtype. Computed by
    one opaque operator (`posformer::rope_cos_sin`), so that under `torch.compile` the tables are written once
    and read by every layer: as plain pointwise code Inductor inlines the cos and sin into each layer's
    rotation kernels and evaluates them for every element of q, k and their gradients, B * H times the
    table's size (7% of a compiled LLaMA training step on an H200, docs/speed.md).
    """
    if inv_freq.requires_grad:
        raise ValueError("rope_cos_sin: inv_freq must not require grad (the tables take no gradient)")
    tables: tuple[Tensor, Tensor] = _cos_sin_op(pos, inv_freq, float(factor))
    return tables


@torch.library.custom_op("posformer::rope_cos_sin", mutates_args=())
def _cos_sin_op(pos: Tensor, inv_freq: Tensor, factor: float) -> tuple[Tensor, Tensor]:
    dtype = torch.promote_types(inv_freq.dtype, torch.float32)
    angles = pos[:, None, :, None].to(dtype) * inv_freq.to(dtype)
    cos, sin = angles.cos(), angles.sin()
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return cos, sin


@_cos_sin_op.register_fake
def _cos_sin_shapes(pos: Tensor, inv_freq: Tensor, factor: float) -> tuple[Tensor, Tensor]:
    shape = (pos.shape[0], 1, pos.shape[1], inv_freq.shape[0])
    dtype = torch.promote_types(inv_freq.dtype, torch.float32)
    return pos.new_empty(shape, dtype=dtype), pos.new_empty(shape, dtype=dtype)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Rotate the first 2*cos.shape[-1] dims of x (pairs as `layout` says); the rest pass.

    x: (B, H, T, dh); cos, sin: (B or 1, 1, T, r/2) with r the rotary dim -> (B, H, T, dh).
    One autograd node (`rotation.Rotation`): the gradient flows to x only, so cos and sin must not need one.
    """
    if cos.requires_grad or sin.requires_grad:
        raise ValueError("apply_rotary: cos and sin must not require grad (the rotation's backward reaches x only)")
    rotated: Tensor = Rotation.apply(x, cos, sin, layout)  # type: ignore[no-untyped-call]  # torch's apply: unannotated
    return rotated


def _longest(q_pos: Tensor, k_pos: Tensor) -> int | None:
    """The largest position in q_pos and k_pos, plus one (None when both are empty)."""
    ends = [int(p.max()) + 1 for p in (q_pos, k_pos) if p.numel()]
    return max(ends) if ends else None


@register("rope")
class Rotary(PositionEncoding):
    """RoPE: score(q at m, k at n) depends on m - n only. Parameter-free; any length.

    `frequency_fraction` p (p-RoPE, Barbero et al. 2024, "Round and Round We Go!"): only the
    floor(p * r/2) highest frequencies rotate; the pairs of the lower ones get angle 0 and pass
    unrotated (p = 1: RoPE, p = 0: no rotation at all). transformers 5.x calls it "proportional" RoPE
    (Gemma's configs), with p its `partial_rotary_factor`.
    `mrope_section` [t, h, w] (None: off) makes it multi-axis RoPE (M-RoPE, Qwen2-VL to Qwen3.5;
    `positions.mrope`): position ids with axes (3, B, T), the r/2 rotary pairs shared out among the temporal,
    height and width axes, contiguously or, with `mrope_interleaved`, in turn (Qwen3-VL). Ids (B, T) are every
    axis alike: RoPE exactly. It takes no scaling that depends on the length.
    `scaling` (None or a dict, see `rope_inv_freq`) extends the context. Its attention
    factor multiplies cos and sin, as in Hugging Face. "dynamic", "dynamic_yarn" and "longrope"
    choose the frequencies in every forward from L = the largest position of that forward + 1
    (over q_pos and k_pos, all rows; LongRoPE switches from its short to its long factors
    exactly when L exceeds original_max_position_embeddings). Keys already in a KV cache keep
    the frequencies they were rotated with: for LongRoPE and dynamic YaRN generation runs the
    sequence again when they go stale (`GoesStale`), so it equals greedy decoding by full passes;
    for "dynamic" (NTK), as in Hugging Face, it does not, and once L exceeds
    original_max_position_embeddings cached decoding no longer equals a full pass.
    For "dynamic" Hugging Face additionally keeps the grown frequencies while L stays above
    the original length (its `max_seq_len_cached`); here each forward depends on its own L only.
    """

    defaults = ROPE_DEFAULTS
    reads_axes: ClassVar[bool] = True
    scalings: ClassVar[tuple[str, ...]] = ("linear", "ntk", "dynamic", "yarn", "dynamic_yarn", "llama3")
    kept: Tensor  # (r/2,) buffer: 1 for the pairs that rotate, 0 for those that `frequency_fraction` leaves still
    inv_freq: Tensor  # (r/2,) buffer, times `kept`
    pair_axes: Tensor | None  # (r/2,) buffer: the axis each pair reads (M-RoPE); None otherwise

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        check_rope_params(cls, params, sizes.head_dim)

    @classmethod
    def rescaled_params(cls, params: Mapping[str, Any], kind: str, new_len: int, trained_len: int) -> PositionParams:
        """`params` extended by the method `kind` (one of `scalings`) to read `new_len` tokens after training at
        `trained_len` (`Rescalable`): scaling {"type": kind, "factor": new_len / trained_len}; the methods that
        switch on the length get original_max_position_embeddings = trained_len, llama3 Llama 3.1's frequency
        factors. "dynamic_yarn" is then YaRN at new_len / trained_len up to new_len tokens and scales further
        past them; new_len = trained_len gives its training-free form, s = max(1, L / trained_len).
        Raises `ValueError` for any other `kind`."""
        if kind not in cls.scalings:
            raise ValueError(
                f"position={cls.name!r} has no context-extension method {kind!r}; "
                f"its methods: {', '.join(cls.scalings)}"
            )
        scaling: dict[str, Any] = {"type": kind, "factor": new_len / trained_len}
        if kind in ("dynamic", "yarn", "dynamic_yarn", "llama3"):
            scaling["original_max_position_embeddings"] = trained_len
        if kind == "llama3":
            scaling.update(low_freq_factor=1.0, high_freq_factor=4.0)
        return cls.resolve_params({**params, "scaling": scaling})

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.theta = float(self.params["theta"])
        self.scaling = None if self.params["scaling"] is None else dict(self.params["scaling"])
        self.rotary_dim, kept, inv_freq, self.attention_factor = rope_frequencies(sizes.head_dim, self.params)
        self.register_buffer("kept", kept, persistent=False)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        section = self.params.get("mrope_section")
        self.position_axes = 1 if section is None else 3
        axes = None if section is None else axis_of_pairs(tuple(section), self.params["mrope_interleaved"])
        self.register_buffer("pair_axes", axes, persistent=False)  # (r/2,) the axis each pair reads, M-RoPE

    @property
    def length_dependent(self) -> bool:
        """Whether the frequencies depend on the current length ("dynamic", "dynamic_yarn", "longrope")."""
        return self.scaling is not None and self.scaling["type"] in LENGTH_DEPENDENT

    def stale_beyond(self) -> int | None:
        """The longest length whose forward rotates keys as every shorter one did (`GoesStale`): LongRoPE's
        original length, dynamic YaRN's `rope_scaling.fixed_up_to`; None for the others (dynamic NTK included,
        whose cached keys stay as Hugging Face leaves them)."""
        if self.scaling is None or self.scaling["type"] not in ("longrope", "dynamic_yarn"):
            return None
        return fixed_up_to(self.scaling)

    def stale_at(self, length: int) -> bool:
        """Whether a forward of `length` (largest position + 1) finds keys cached by shorter forwards rotated
        with other frequencies (`GoesStale`): LongRoPE just past its switch, dynamic YaRN at every longer L."""
        beyond = self.stale_beyond()
        if beyond is None or self.scaling is None:
            return False
        return length > beyond if self.scaling["type"] == "dynamic_yarn" else length == beyond + 1

    def frequencies_for(self, seq_len: int | None) -> tuple[Tensor, float]:
        """inv_freq (r/2,) and attention factor for a forward whose largest position is seq_len - 1."""
        if self.scaling is None or not self.length_dependent or seq_len is None or seq_len <= fixed_up_to(self.scaling):
            return self.inv_freq, self.attention_factor
        inv_freq, factor = rope_inv_freq(self.rotary_dim, self.theta, self.scaling, seq_len=seq_len)
        inv_freq = inv_freq.to(self.inv_freq.device, torch.promote_types(self.inv_freq.dtype, torch.float32))
        return inv_freq * self.kept.to(inv_freq.dtype), factor

    def cos_sin(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """pos: (B, T) -> cos, sin: (B or 1, 1, T, r/2) float32, times the attention factor."""
        return self.tables(pos, pos)[0]

    def tables(self, q_pos: Tensor, k_pos: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """((cos, sin) at q_pos, (cos, sin) at k_pos), as `cos_sin`; computed once per forward."""
        return self.per_forward("tables", q_pos, k_pos, self._tables)

    def _tables(self, q_pos: Tensor, k_pos: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        inv_freq, factor = self.frequencies_for(_longest(q_pos, k_pos) if self.length_dependent else None)
        q_table = self._cos_sin(q_pos, inv_freq, factor)
        return q_table, q_table if k_pos is q_pos else self._cos_sin(k_pos, inv_freq, factor)

    def _cos_sin(self, pos: Tensor, inv_freq: Tensor, factor: float) -> tuple[Tensor, Tensor]:
        """pos: (B, T), or (3, B, T) with axes (M-RoPE) -> the tables (B, 1, T, r/2)."""
        if pos.dim() == 3 and self.pair_axes is not None:
            return mrope_cos_sin(pos, inv_freq, self.pair_axes, factor)
        return rope_cos_sin(pos, inv_freq, factor)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        layout = self.params["layout"]
        (cos_q, sin_q), (cos_k, sin_k) = self.tables(q_pos, k_pos)
        q = apply_rotary(q, cos_q.to(q.dtype), sin_q.to(q.dtype), layout)
        k = apply_rotary(k, cos_k.to(k.dtype), sin_k.to(k.dtype), layout)
        return q, k
