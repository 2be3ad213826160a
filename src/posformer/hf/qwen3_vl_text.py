"""Qwen3-VL's language model (`qwen3_vl_text`, Qwen3VLTextModel): Qwen3's decoder with multi-axis RoPE.

The layers are Qwen3's (`hf.llama`: per-head QK-norm before RoPE, SwiGLU, GQA, no biases by default). Its RoPE is
M-RoPE, always interleaved (Qwen3-VL rotates pair i by the height when i % 3 = 1, the width when i % 3 = 2, within
their sections; `positions.mrope`): `mrope_section` from `rope_scaling` (transformers 4.57.6) or
`rope_parameters` (5.x), [24, 20, 20] when absent, as both versions default. Position ids with axes, (3, B, T),
go to the model as `position_ids`; text ids (B, T) are all axes alike. Its DeepStack inputs (visual features added
to the first layers' hidden states) come with images only, from the vision model: a text model given none
computes what Qwen3VLTextModel computes without them. Heads: Qwen3VLTextModel (none), the only class transformers
has for this model_type.
"""

from __future__ import annotations

import copy

from posformer.config import Config
from posformer.hf import llama
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layout import require_fields

MODEL_TYPE = "qwen3_vl_text"
DEFAULT_SECTION = [24, 20, 20]  # transformers' default when the config names none
MROPE_KEYS = ("mrope_section", "mrope_interleaved")


def _rope_entry(hf: dict) -> tuple[str, dict] | None:
    """(the key of the config's RoPE dict, the dict): v5's rope_parameters or v4's rope_scaling; None without one."""
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(hf.get(key), dict):
            return key, hf[key]
    return None


def config_from_hf(hf: dict) -> Config:
    entry = _rope_entry(hf)
    section = DEFAULT_SECTION if entry is None else entry[1].get("mrope_section", DEFAULT_SECTION)
    as_qwen3 = copy.deepcopy(hf)
    as_qwen3["model_type"] = "qwen3"
    if entry is not None:
        as_qwen3[entry[0]] = {k: v for k, v in entry[1].items() if k not in MROPE_KEYS}
    cfg = llama.config_from_hf(as_qwen3)
    if cfg.layer_types is not None or cfg.sliding_window is not None:
        raise unsupported(MODEL_TYPE, "sliding windows or NoPE layers (Qwen3-VL's text model has none)")
    params = {**cfg.position_params, "mrope_section": list(section), "mrope_interleaved": True}
    try:
        return cfg.replace(position_params=params, hf_model_type=MODEL_TYPE)
    except ValueError as error:
        raise unsupported(MODEL_TYPE, f"rope mrope_section={section!r}: {error}") from error


def config_to_hf(cfg: Config) -> dict:
    params = dict(cfg.position_params)
    if params.get("mrope_section") is None or not params.get("mrope_interleaved"):
        raise unsupported(MODEL_TYPE, "RoPE without an interleaved mrope_section (it rotates by three axes) (to_hf)")
    if cfg.head_kind != "none":
        raise unsupported(MODEL_TYPE, f"head {cfg.head_kind!r} (Qwen3VLTextModel has none) (to_hf)")
    require_fields(cfg, MODEL_TYPE, sliding_window=None, layer_types=None)  # every layer full attention with RoPE
    section = params.pop("mrope_section")
    params.pop("mrope_interleaved")
    out = llama.config_to_hf(cfg.replace(position_params=params, hf_model_type="qwen3"))
    scaling = out.get("rope_scaling") or {"rope_type": "default"}
    out["rope_scaling"] = {**scaling, "mrope_section": list(section), "mrope_interleaved": True}
    return {**out, "model_type": MODEL_TYPE, "architectures": ["Qwen3VLTextModel"]}


def rules(cfg: Config) -> list:
    return llama.rules(cfg)


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, llama.ignore))
