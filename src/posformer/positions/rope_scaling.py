"""RoPE scalings: the inverse frequencies (and cos/sin factor) of context-extended RoPE.

A scaling is None or a dict {"type": ..., "factor": ..., <the type's keys>}:

  "linear"   position interpolation (Chen et al. 2023): every theta_i / factor.
  "ntk"      static NTK-aware: base' = base * factor^(d/(d-2)).
  "dynamic"  dynamic NTK (Hugging Face "dynamic"): base' = base * (factor * L / L0 - (factor - 1))^(d/(d-2))
             for the current length L > L0 = original_max_position_embeddings, unscaled otherwise.
  "yarn"     YaRN (Peng et al. 2023): a ramp between extrapolated and interpolated
             frequencies over the dims between beta_fast and beta_slow rotations, and an
             attention factor 0.1 * ln(factor) + 1 on cos and sin.
  "dynamic_yarn"  dynamic YaRN (Peng et al. 2023, section 3.3 "Dynamic Scaling"): "yarn" with the factor
             s = max(factor, L / original_max_position_embeddings) for the current length L; s = 1
             (factor 1, L <= original) is RoPE unscaled. factor 1 is the paper's training-free form
             s = max(1, L / L0); factor > 1 is a model fine-tuned with YaRN at that factor, scaled further
             once L passes factor * L0 (`LlamaDynamicYaRNScaledRotaryEmbedding(finetuned=True)` of the
             paper's code, github.com/jquesnelle/yarn). Hugging Face has no such type.
  "llama3"   Llama 3.1: low frequencies / factor, high kept, a smooth ramp between.
  "longrope" LongRoPE (Ding et al. 2024; Phi-3): theta_i / short_factor[i] while the current length
             L <= original_max_position_embeddings, theta_i / long_factor[i] beyond it, and an
             attention factor sqrt(1 + ln(factor) / ln(original)) on cos and sin (or the one given).

The arithmetic repeats Hugging Face `transformers.modeling_rope_utils` (4.57.6) operation
for operation, so the results agree to the last bit; the tests compare against it.
Unlike Hugging Face, "dynamic", "yarn", "dynamic_yarn", "llama3" and "longrope" require
original_max_position_embeddings (Hugging Face falls back to `config.max_position_embeddings`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from posformer.positions.frequencies import frequencies
from posformer.utils.validation import is_number

SCALING_TYPES = ("linear", "ntk", "dynamic", "yarn", "dynamic_yarn", "llama3", "longrope")
LENGTH_DEPENDENT = ("dynamic", "dynamic_yarn", "longrope")  # the frequencies depend on the current length
REQUIRED_KEYS = {
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "dynamic_yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("factor", "short_factor", "long_factor", "original_max_position_embeddings"),
}
OPTIONAL_KEYS = {  # None stands for "absent", as in Hugging Face
    "yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"),
    "dynamic_yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"),  # the factor follows s
    "longrope": ("attention_factor",),
}


def check_scaling(scaling: Any, dim: int, label: str = "scaling") -> None:
    """Raise `ValueError` naming `label` (and the key) when `scaling` is not valid for rotary dim `dim`."""
    if scaling is None:
        return
    if not isinstance(scaling, dict):
        raise ValueError(
            f"{label}={scaling!r} is invalid: expected None or a dict such as {{'type': 'linear', 'factor': 2.0}}"
        )
    kind = scaling.get("type")
    if kind not in SCALING_TYPES:
        hint = " (write the Hugging Face key 'rope_type' as 'type')" if "rope_type" in scaling else ""
        raise ValueError(
            f"{label}={scaling!r} is invalid: unknown type {kind!r}; expected one of {', '.join(SCALING_TYPES)}{hint}"
        )
    required, optional = REQUIRED_KEYS[kind], OPTIONAL_KEYS.get(kind, ())
    for key in required:
        if scaling.get(key) is None:
            raise ValueError(f"{label}={scaling!r} is invalid: type {kind!r} requires the key {key!r}")
    unknown = sorted(set(scaling) - {"type", *required, *optional})
    if unknown:
        raise ValueError(
            f"{label} has unknown key(s) {unknown} for type {kind!r}: "
            f"allowed keys are {', '.join(('type', *required, *optional))}"
        )

    def bad(key: str, expected: str) -> ValueError:
        return ValueError(f"{label}[{key!r}]={scaling[key]!r} is invalid for type {kind!r}: expected {expected}")

    if not is_number(scaling["factor"]) or scaling["factor"] < 1:
        raise bad("factor", "a number >= 1")
    original = scaling.get("original_max_position_embeddings")
    if original is not None and (not isinstance(original, int) or isinstance(original, bool) or original <= 0):
        raise bad("original_max_position_embeddings", "a positive integer")
    if kind in ("ntk", "dynamic") and dim <= 2:
        raise ValueError(
            f"{label}={scaling!r} is invalid: type {kind!r} needs a rotary dimension > 2, "
            f"got {dim} (the exponent is d/(d-2))"
        )
    if kind == "llama3":
        for key in ("low_freq_factor", "high_freq_factor"):
            if not is_number(scaling[key]) or scaling[key] <= 0:
                raise bad(key, "a number > 0")
        if scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
            raise bad("high_freq_factor", f"a number > low_freq_factor={scaling['low_freq_factor']!r}")
    if kind in ("yarn", "dynamic_yarn"):
        for key in ("beta_fast", "beta_slow", "attention_factor"):
            if scaling.get(key) is not None and (not is_number(scaling[key]) or scaling[key] <= 0):
                raise bad(key, "a number > 0 (or None for the default)")
        for key in ("mscale", "mscale_all_dim"):
            if scaling.get(key) is not None and not is_number(scaling[key]):
                raise bad(key, "a number (or None)")
        if (scaling.get("beta_fast") or 32) <= (scaling.get("beta_slow") or 1):
            raise bad("beta_fast", f"a number > beta_slow={scaling.get('beta_slow') or 1!r}")
        if "truncate" in scaling and not isinstance(scaling["truncate"], bool):
            raise bad("truncate", "True or False")
    if kind == "longrope":
        for key in ("short_factor", "long_factor"):
            values = scaling[key]
            if (
                not isinstance(values, (list, tuple))
                or len(values) != dim // 2
                or not all(is_number(v) and v > 0 for v in values)
            ):
                raise bad(key, f"a list of {dim // 2} numbers > 0 (one per rotated pair of the rotary dim {dim})")
        if scaling.get("attention_factor") is not None and (
            not is_number(scaling["attention_factor"]) or scaling["attention_factor"] <= 0
        ):
            raise bad("attention_factor", "a number > 0 (or None for the default)")


def scaled_inv_freq(dim: int, base: float, scaling: dict | None, seq_len: int | None = None) -> tuple[Tensor, float]:
    """(inv_freq (dim/2,) float32, attention_factor) for a validated `scaling` (see `check_scaling`)."""
    if scaling is None:
        return frequencies(dim, base), 1.0
    kind, factor = scaling["type"], scaling["factor"]
    if kind == "linear":
        return frequencies(dim, base) / factor, 1.0
    if kind == "ntk":
        return frequencies(dim, base * factor ** (dim / (dim - 2))), 1.0
    if kind == "dynamic":
        original = scaling["original_max_position_embeddings"]
        if seq_len is None or seq_len <= original:
            return frequencies(dim, base), 1.0
        return frequencies(dim, base * ((factor * seq_len / original) - (factor - 1)) ** (dim / (dim - 2))), 1.0
    if kind == "yarn":
        return _yarn(dim, base, scaling)
    if kind == "dynamic_yarn":
        s = dynamic_yarn_factor(scaling, seq_len)
        return (frequencies(dim, base), 1.0) if s == 1 else _yarn(dim, base, {**scaling, "factor": s})
    if kind == "longrope":
        return _longrope(dim, base, scaling, seq_len)
    return _llama3(dim, base, scaling), 1.0


def dynamic_yarn_factor(scaling: dict, seq_len: int | None) -> float:
    """The YaRN factor s = max(factor, seq_len / original_max_position_embeddings) of a "dynamic_yarn" scaling
    for a forward of seq_len positions (None: as at initialisation, s = factor)."""
    factor = float(scaling["factor"])
    return factor if seq_len is None else max(factor, seq_len / scaling["original_max_position_embeddings"])


def fixed_up_to(scaling: dict) -> int:
    """The longest length L whose forward uses the frequencies of initialisation (seq_len None), for a scaling
    in LENGTH_DEPENDENT: original_max_position_embeddings, and for "dynamic_yarn" the longest L with
    L / original <= factor (compared as `dynamic_yarn_factor` compares them)."""
    original = scaling["original_max_position_embeddings"]
    if scaling["type"] != "dynamic_yarn":
        return original
    factor, n = float(scaling["factor"]), math.floor(scaling["factor"] * original)
    if (n + 1) / original <= factor:  # the product rounded down past an integer
        return n + 1
    return n - 1 if n / original > factor else n


def _longrope(dim: int, base: float, scaling: dict, seq_len: int | None) -> tuple[Tensor, float]:
    """Hugging Face `_compute_longrope_parameters`: the long factors once seq_len > original, else the short."""
    original, factor = scaling["original_max_position_embeddings"], scaling["factor"]
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    key = "long_factor" if seq_len and seq_len > original else "short_factor"
    ext_factors = torch.tensor(scaling[key], dtype=torch.float32)
    inv_freq_shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (ext_factors * base**inv_freq_shape), attention_factor


def _yarn_mscale(scale: float, mscale: float = 1) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_correction_dim(rotations: float, dim: int, base: float, original: int) -> float:
    """The (fractional) dim index whose wavelength fits `rotations` times into `original` positions."""
    return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))


def _yarn(dim: int, base: float, scaling: dict) -> tuple[Tensor, float]:
    """Hugging Face `_compute_yarn_parameters`: truncate defaults to True (floor/ceil of the ramp ends)."""
    factor, original = scaling["factor"], scaling["original_max_position_embeddings"]
    attention_factor = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim))
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

    low = _yarn_correction_dim(beta_fast, dim, base, original)
    high = _yarn_correction_dim(beta_slow, dim, base, original)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # prevent a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)

    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # 1: extrapolate (high frequencies, unchanged), 0: interpolate (divided by factor)
    return interpolation * (1 - keep) + extrapolation * keep, attention_factor


def _llama3(dim: int, base: float, scaling: dict) -> Tensor:
    """Hugging Face `_compute_llama3_parameters`."""
    factor, low_factor, high_factor = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    inv_freq = frequencies(dim, base)
    low_freq_wavelen, high_freq_wavelen = original / low_factor, original / high_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low_factor) / (high_factor - low_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)
