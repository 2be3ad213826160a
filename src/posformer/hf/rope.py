"""RoPE settings in Hugging Face configs <-> posformer's `position_params`.

Two config forms are read: transformers v4's `rope_theta` + `rope_scaling`
({"rope_type" or "type": ..., "factor": ..., ...}) and v5's `rope_parameters`
({"rope_type": ..., "rope_theta": ..., "partial_rotary_factor": ..., ...}, or one such dict per layer type:
{"full_attention": {...}, "sliding_attention": {...}}). Both are written: v4 by default, v5 by
`v5_rope_parameters` (`posformer.to_hf(..., rope_parameters=True)`). The original context length follows
transformers 4.57.6: "dynamic" uses `max_position_embeddings`; "yarn" the scaling's
`original_max_position_embeddings`, else `max_position_embeddings`, and its `factor` as given (the ratio of the
two lengths only when the factor is missing, as transformers computes it; a factor that disagrees with the ratio
is used as it stands, as there); "llama3" the scaling's own; "longrope"
the config's top-level `original_max_position_embeddings` (Phi-3), whose ratio to `max_position_embeddings` is
then its factor, else `max_position_embeddings` with the scaling's factor.
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.family import UnsupportedCheckpoint, unsupported

SCALING_KEYS = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": (
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "truncate",
    ),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("short_factor", "long_factor", "attention_factor"),
}


KNOWN_TYPES = ("default", "proportional", *SCALING_KEYS)
LAYER_TYPES = ("full_attention", "sliding_attention")  # the entries of the families that nest by layer type


def _check_v5_params(params: dict, hf: dict) -> None:
    """Refuse, by name, what would otherwise leave a layer on another RoPE than the config says: an entry of an
    unknown `rope_type` (read or not), a dict that mixes flat keys with entries by layer type, and an entry for a
    layer type the config does not have (a misspelt label, whose layers would take the default)."""
    model_type = hf.get("model_type", "?")
    nested = {key: value for key, value in params.items() if isinstance(value, dict)}
    flat = [key for key, value in params.items() if not isinstance(value, dict) and value is not None]
    if nested and flat:
        raise unsupported(
            model_type,
            f"rope_parameters that mix flat keys ({', '.join(flat)}) with entries by layer type ({', '.join(nested)})",
        )
    known = set(LAYER_TYPES) | set(hf.get("layer_types") or ())
    for key in nested:
        if key not in known:
            raise unsupported(
                model_type,
                f"rope_parameters[{key!r}], an entry for a layer type the config does not have "
                f"(its layer types: {', '.join(sorted(known))})",
            )
    for where, entry in (nested or {None: params}).items():
        kind = entry.get("rope_type", entry.get("type", "default"))
        if kind not in KNOWN_TYPES:
            name = "rope_parameters" + ("" if where is None else f"[{where!r}]")
            raise unsupported(model_type, f"{name} of rope_type {kind!r} (supported: {', '.join(KNOWN_TYPES)})")


def _v5_params(hf: dict, layer_type: str | None) -> dict | None:
    """v5's `rope_parameters` for `layer_type`: the flat dict, or the entry of a dict nested by layer type
    ("full_attention" when no type is named); None in a v4 config. Every entry is checked (`_check_v5_params`)."""
    params = hf.get("rope_parameters")
    if not isinstance(params, dict):
        return None
    _check_v5_params(params, hf)
    if any(isinstance(value, dict) for value in params.values()):  # nested by layer type (None: no entry)
        key = layer_type or "full_attention"
        if not isinstance(params.get(key), dict):
            raise unsupported(
                hf.get("model_type", "?"), f"rope_parameters without an entry for {key!r} (it has {', '.join(params)})"
            )
        return params[key]
    return params


def scaling_dict(hf: dict, layer_type: str | None = None) -> tuple[dict | None, float | None, bool]:
    """(the scaling dict in either form, or None; rope_theta from rope_parameters, if there; whether the config
    is in v5's form)."""
    params = _v5_params(hf, layer_type)
    if params is not None:
        return params, params.get("rope_theta"), True
    return hf.get("rope_scaling"), None, False


def has_v5_layer_params(hf: dict, layer_type: str) -> bool:
    """Whether `hf` is a v5 config whose `rope_parameters` nest an entry for `layer_type`."""
    params = hf.get("rope_parameters")
    return isinstance(params, dict) and isinstance(params.get(layer_type), dict)


def rope_params(hf: dict, default_theta: float = 10000.0, layer_type: str | None = None) -> dict:
    """posformer `position_params` for position="rope" (layout "half", as Hugging Face rotates), from the v4
    fields or from v5's `rope_parameters` (for `layer_type`, when they nest by layer type). A
    `partial_rotary_factor` other than 1 (top level, or inside `rope_parameters`) becomes `rotary_fraction`."""
    model_type = hf.get("model_type", "?")
    scaling, theta, v5 = scaling_dict(hf, layer_type)
    theta = theta if theta is not None else hf.get("rope_theta", default_theta)
    fraction = (scaling or {}).get("partial_rotary_factor") if v5 else None
    fraction = float(fraction if fraction is not None else hf.get("partial_rotary_factor") or 1.0)
    params = {"theta": float(theta), "layout": "half", **({"rotary_fraction": fraction} if fraction != 1.0 else {})}
    if not scaling:
        return params
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return params
    if kind == "proportional":
        return _proportional(params, scaling)
    if kind not in SCALING_KEYS:
        raise unsupported(model_type, f"rope scaling type {kind!r} (supported: default, {', '.join(SCALING_KEYS)})")
    ours = {"type": kind}
    for key in SCALING_KEYS[kind]:
        if scaling.get(key) is not None:
            ours[key] = scaling[key]
    if kind == "dynamic" or (kind == "yarn" and "original_max_position_embeddings" not in ours):
        ours["original_max_position_embeddings"] = hf["max_position_embeddings"]
    if kind == "yarn" and scaling.get("original_max_position_embeddings") and scaling.get("factor") is None:
        ours["factor"] = hf["max_position_embeddings"] / scaling["original_max_position_embeddings"]
    if kind == "longrope":
        ours.update(_longrope_lengths(hf, scaling, v5))
    params["scaling"] = ours
    return params


def partial_rope_params(hf: dict, default_fraction: float) -> dict:
    """`rope_params` of a family whose config class rotates `default_fraction` of each head when the config gives no
    `partial_rotary_factor` (top level, or inside v5's `rope_parameters`): GLM-4.5's 0.5, Qwen3-Next's 0.25."""
    params = rope_params(hf)
    scaling, _, v5 = scaling_dict(hf)
    given = (scaling or {}).get("partial_rotary_factor") if v5 else None
    if given is None and hf.get("partial_rotary_factor") is None:
        params["rotary_fraction"] = default_fraction
    return params


def _proportional(params: dict, scaling: dict) -> dict:
    """transformers 5.x's "proportional" RoPE (Gemma): every pair of the head rotates with base^(-2i/head_dim), but
    only the first floor(partial_rotary_factor * head_dim / 2), the highest frequencies; the others get frequency
    0. That is p-RoPE: `frequency_fraction` p, not `rotary_fraction`. Its `factor` divides every frequency
    (linear scaling)."""
    ours = {"theta": params["theta"], "layout": "half"}
    fraction = scaling.get("partial_rotary_factor")
    if fraction is not None and float(fraction) != 1.0:
        ours["frequency_fraction"] = float(fraction)
    factor = float(scaling.get("factor") or 1.0)
    if factor != 1.0:
        ours["scaling"] = {"type": "linear", "factor": factor}
    return ours


def _longrope_lengths(hf: dict, scaling: dict, v5: bool) -> dict:
    """LongRoPE's factor and original length as transformers 4.57.6 reads them (v5 may keep the original length
    inside `rope_parameters`)."""
    original = hf.get("original_max_position_embeddings") or (
        scaling.get("original_max_position_embeddings") if v5 else None
    )
    if original:
        return {"factor": hf["max_position_embeddings"] / original, "original_max_position_embeddings": original}
    return {"factor": scaling.get("factor") or 1.0, "original_max_position_embeddings": hf["max_position_embeddings"]}


def rope_to_hf(cfg: Config, partial: bool = False) -> dict:
    """The `rope_theta` / `rope_scaling` / `max_position_embeddings` (and `partial_rotary_factor`) entries of a
    v4 HF config. `partial`: the family rotates part of each head (transformers 4.57.6's others fail on it)."""
    params = cfg.position_params
    if params.get("mrope_section") is not None:
        raise UnsupportedCheckpoint(
            f"to_hf: {cfg.hf_model_type} has no multi-axis RoPE (mrope_section={params['mrope_section']}; "
            "qwen3_vl_text has)"
        )
    if params.get("rotary_fraction", 1.0) != 1.0 and not partial:
        raise UnsupportedCheckpoint(
            f"to_hf: {cfg.hf_model_type} rotates every dimension of a head in transformers "
            f"4.57.6 (rotary_fraction={params['rotary_fraction']})"
        )
    if params.get("frequency_fraction", 1.0) != 1.0:
        raise UnsupportedCheckpoint(
            f"to_hf: p-RoPE (frequency_fraction={params['frequency_fraction']}) has no Hugging Face equivalent in "
            "transformers 4.57.6 (5.x reads it as rope_type 'proportional')"
        )
    out = {
        "rope_theta": float(params.get("theta", 10000.0)),
        "rope_scaling": None,
        "max_position_embeddings": cfg.max_positions,
    }
    if params.get("rotary_fraction", 1.0) != 1.0:
        out["partial_rotary_factor"] = float(params["rotary_fraction"])
    scaling = params.get("scaling")
    if scaling is None:
        return out
    kind = scaling["type"]
    if kind not in SCALING_KEYS:
        raise UnsupportedCheckpoint(
            f"to_hf: RoPE scaling {kind!r} has no Hugging Face equivalent (Hugging Face has: {', '.join(SCALING_KEYS)})"
        )
    hf_scaling = {"rope_type": kind, **{k: v for k, v in scaling.items() if k != "type"}}
    if kind == "dynamic":
        out["max_position_embeddings"] = hf_scaling.pop("original_max_position_embeddings")
    if kind == "yarn":
        original = hf_scaling.pop("original_max_position_embeddings")
        out["max_position_embeddings"] = int(round(original * scaling["factor"]))
        hf_scaling["original_max_position_embeddings"] = original
    if kind == "longrope":  # Phi-3's form: the original length at the top, the factor their ratio
        original = hf_scaling.pop("original_max_position_embeddings")
        if abs(cfg.max_positions / original - hf_scaling.pop("factor")) > 1e-9:
            raise UnsupportedCheckpoint(
                f"to_hf: a longrope factor other than max_positions / "
                f"original_max_position_embeddings = {cfg.max_positions} / {original}"
            )
        hf_scaling = {"type": hf_scaling.pop("rope_type"), **hf_scaling}
        out["original_max_position_embeddings"] = original
    out["rope_scaling"] = hf_scaling
    return out


def v5_rope_parameters(hf_config: dict) -> dict:
    """A config written in v4's form (`rope_theta`, `rope_scaling`, `partial_rotary_factor`, Gemma 3's
    `rope_local_base_freq`, ModernBERT's `global_rope_theta` and `local_rope_theta`) in v5's: one
    `rope_parameters` dict, nested by layer type when the layers have two RoPE settings (ModernBERT's scaling on
    both, as transformers 4.57.6 and 5 apply it). LongRoPE's `original_max_position_embeddings` goes inside too, and
    stays at the top."""
    out = dict(hf_config)
    scaling = out.pop("rope_scaling", None) or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    two_bases = "global_rope_theta" in out  # ModernBERT's
    params = {
        "rope_type": kind,
        "rope_theta": out.pop("global_rope_theta" if two_bases else "rope_theta"),
        **{key: value for key, value in scaling.items() if key not in ("type", "rope_type")},
    }
    if "partial_rotary_factor" in out:
        params["partial_rotary_factor"] = out.pop("partial_rotary_factor")
    if kind == "longrope" and "original_max_position_embeddings" in out:
        params["original_max_position_embeddings"] = out["original_max_position_embeddings"]
    local = out.pop("rope_local_base_freq", None)
    if local is not None:
        params = {"full_attention": params, "sliding_attention": {"rope_type": "default", "rope_theta": local}}
    if two_bases:
        params = {"full_attention": params, "sliding_attention": {**params, "rope_theta": out.pop("local_rope_theta")}}
    out["rope_parameters"] = params
    return out
