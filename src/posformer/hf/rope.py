"""RoPE settings in Hugging Face configs <-> posformer's `position_params`.

Two config forms are read: transformers v4's `rope_theta` + `rope_scaling`
({"rope_type" or "type": ..., "factor": ..., ...}) and v5's `rope_parameters`
({"rope_type": ..., "rope_theta": ..., ...}). The original context length follows
transformers 4.57.6: "dynamic" uses `max_position_embeddings`; "yarn" the scaling's
`original_max_position_embeddings`, else `max_position_embeddings`; "llama3" the scaling's own; "longrope"
the config's top-level `original_max_position_embeddings` (Phi-3), whose ratio to `max_position_embeddings` is
then its factor, else `max_position_embeddings` with the scaling's factor.
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.family import UnsupportedCheckpoint, unsupported

SCALING_KEYS = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
             "attention_factor", "truncate"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("short_factor", "long_factor", "attention_factor"),
}


def _scaling_dict(hf: dict) -> tuple[dict | None, float | None]:
    """(the scaling dict in either form, or None; rope_theta from rope_parameters, if there)."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict):
        return params, params.get("rope_theta")
    return hf.get("rope_scaling"), None


def rope_params(hf: dict, default_theta: float = 10000.0) -> dict:
    """posformer `position_params` for position="rope" (layout "half", as Hugging Face rotates)."""
    model_type = hf.get("model_type", "?")
    scaling, theta = _scaling_dict(hf)
    theta = theta if theta is not None else hf.get("rope_theta", default_theta)
    params = {"theta": float(theta), "layout": "half"}
    if not scaling:
        return params
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return params
    if kind not in SCALING_KEYS:
        raise unsupported(model_type, f"rope scaling type {kind!r} (supported: default, {', '.join(SCALING_KEYS)})")
    ours = {"type": kind}
    for key in SCALING_KEYS[kind]:
        if scaling.get(key) is not None:
            ours[key] = scaling[key]
    if kind == "dynamic" or (kind == "yarn" and "original_max_position_embeddings" not in ours):
        ours["original_max_position_embeddings"] = hf["max_position_embeddings"]
    if kind == "yarn" and "original_max_position_embeddings" in scaling:
        ours["factor"] = hf["max_position_embeddings"] / scaling["original_max_position_embeddings"]
    if kind == "longrope":
        ours.update(_longrope_lengths(hf, scaling))
    params["scaling"] = ours
    return params


def _longrope_lengths(hf: dict, scaling: dict) -> dict:
    """LongRoPE's factor and original length as transformers 4.57.6 reads them."""
    original = hf.get("original_max_position_embeddings")
    if original:
        return {"factor": hf["max_position_embeddings"] / original, "original_max_position_embeddings": original}
    return {"factor": scaling.get("factor") or 1.0, "original_max_position_embeddings": hf["max_position_embeddings"]}


def rope_to_hf(cfg: Config) -> dict:
    """The `rope_theta` / `rope_scaling` / `max_position_embeddings` entries of a v4 HF config."""
    params = cfg.position_params
    if params.get("frequency_fraction", 1.0) != 1.0:
        raise UnsupportedCheckpoint(f"to_hf: p-RoPE (frequency_fraction={params['frequency_fraction']}) has no "
                                    f"Hugging Face equivalent")
    out = {"rope_theta": float(params.get("theta", 10000.0)), "rope_scaling": None,
           "max_position_embeddings": cfg.max_positions}
    scaling = params.get("scaling")
    if scaling is None:
        return out
    kind = scaling["type"]
    if kind not in SCALING_KEYS:
        raise UnsupportedCheckpoint(f"to_hf: RoPE scaling {kind!r} has no Hugging Face equivalent "
                                    f"(Hugging Face has: {', '.join(SCALING_KEYS)})")
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
            raise UnsupportedCheckpoint(f"to_hf: a longrope factor other than max_positions / "
                                        f"original_max_position_embeddings = {cfg.max_positions} / {original}")
        hf_scaling = {"type": hf_scaling.pop("rope_type"), **hf_scaling}
        out["original_max_position_embeddings"] = original
    out["rope_scaling"] = hf_scaling
    return out
