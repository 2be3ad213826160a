"""Qwen3.5's text model (model_type "qwen3_5_text", transformers 5 only): the hybrid layers of `qwen3_hybrid` (gated
DeltaNet and gated attention) with a dense SwiGLU of `intermediate_size` in every layer and multi-axis RoPE.

Its RoPE is M-RoPE, always interleaved (transformers' Qwen3_5TextRotaryEmbedding recomposes the pairs so whatever
`mrope_interleaved` says; `positions.mrope`), on the first `partial_rotary_factor` of each head: `mrope_section`
from `rope_parameters` (or v4's `rope_scaling`), [11, 11, 10] when absent, as transformers. Position ids with axes,
(3, B, T), go to the model as `position_ids`; text ids (B, T) are all axes alike, where M-RoPE is RoPE. The gated
DeltaNet layers name their tensors as posformer does (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, ...).
A checkpoint cut from Qwen3.5's vision-language model keeps its text weights under `model.language_model.`, which
transformers renames to `model.` on load (its `PrefixChange`), and posformer too; the vision tower's weights
(`model.visual.*`) and the multi-token prediction weights (`mtp.*`), which transformers' Qwen3_5ForCausalLM does not
load either, are dropped (logged). Heads: Qwen3_5ForCausalLM (causal_lm), Qwen3_5TextModel (none). `to_hf` writes
the RoPE settings in v5's `rope_parameters` and refuses an export for transformers 4, which has no Qwen3.5.
"""

from __future__ import annotations

import logging

from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.mapping import Rule
from posformer.hf.mixtral import dense_ffn_rules
from posformer.hf.qwen3_hybrid import hybrid_fields, hybrid_rules, hybrid_to_hf, ignore, without_mtp
from posformer.hf.rope import v5_rope_parameters
from posformer.hf.versions import writer_major

MODEL_TYPE = "qwen3_5_text"
DEFAULT_SECTION = [11, 11, 10]  # transformers' default when the config names none
MROPE_KEYS = ("mrope_section", "mrope_interleaved")
VL_TEXT_PREFIX, VISION_PREFIX = "model.language_model.", "model.visual."

log = logging.getLogger(__name__)


def _section(hf: dict) -> list:
    """`mrope_section` of v5's `rope_parameters` or v4's `rope_scaling`, else transformers' default."""
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(hf.get(key), dict):
            return hf[key].get("mrope_section", DEFAULT_SECTION)
    return DEFAULT_SECTION


def config_from_hf(hf: dict) -> Config:
    fields = hybrid_fields(hf, MODEL_TYPE, d_ff=12288, kv_heads=4)
    section = _section(hf)
    fields["position_params"] = {**fields["position_params"], "mrope_section": section, "mrope_interleaved": True}
    try:
        return Config(**fields)
    except ValueError as error:
        if "mrope" not in str(error):
            raise
        raise unsupported(MODEL_TYPE, f"rope mrope_section={section!r}: {error}") from error


def config_to_hf(cfg: Config) -> dict:
    section = cfg.position_params.get("mrope_section")
    if section is None or not cfg.position_params.get("mrope_interleaved"):
        raise unsupported(MODEL_TYPE, "RoPE without an interleaved mrope_section (it rotates by three axes) (to_hf)")
    out = v5_rope_parameters(hybrid_to_hf(cfg, MODEL_TYPE, "Qwen3_5", model="Qwen3_5TextModel"))
    out["rope_parameters"] = {**out["rope_parameters"], "mrope_section": list(section), "mrope_interleaved": True}
    return out


def rules(cfg: Config) -> list[Rule]:
    """The hybrid layers' rules, each with a dense SwiGLU `mlp`."""
    return hybrid_rules(cfg, lambda ours, theirs, layer: dense_ffn_rules(f"{ours}.ffn", f"{theirs}.mlp", cfg.ff_dim))


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Without the multi-token prediction and vision weights; `model.language_model.` read as `model.`."""
    vision = [key for key in state if key.startswith(VISION_PREFIX)]
    if vision:
        log.info("%s: not loaded (the vision model's weights, as transformers): %d tensors", MODEL_TYPE, len(vision))
    kept = {key: tensor for key, tensor in without_mtp(state, MODEL_TYPE).items() if key not in vision}
    return {
        f"model.{key.removeprefix(VL_TEXT_PREFIX)}" if key.startswith(VL_TEXT_PREFIX) else key: t
        for key, t in kept.items()
    }


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """Refuse an export for transformers 4, which has no Qwen3.5."""
    if writer_major(hf, "to_hf") < 5:
        raise unsupported(
            MODEL_TYPE, f"an export for transformers {hf['transformers_version']} (Qwen3.5 is in transformers 5 only)"
        )


FAMILY = register(
    Family(
        (MODEL_TYPE,),
        config_from_hf,
        config_to_hf,
        rules,
        ignore,
        prepare_state=prepare_state,
        finish_export=finish_export,
        writes=("attention_output_gate", "mixer"),
    )
)
