"""The registry of Hugging Face families: config mapping and weight rules, both directions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.mapping import Rule


class UnsupportedCheckpoint(ValueError):
    """A model_type posformer does not map, or a config feature it does not implement."""


@dataclass(frozen=True)
class Family:
    """One Hugging Face model family.

    config_from_hf: HF config dict -> `Config` (raises `UnsupportedCheckpoint` naming the feature).
    config_to_hf: `Config` -> HF config dict that `transformers` loads.
    rules: `Config` -> the weight `Rule`s for the architecture (and head) it describes.
    ignore: regexes of HF checkpoint keys read and deliberately dropped.
    prepare_state: (`Config`, HF config dict, HF state) -> the HF state in the layout `rules` describe,
      for layouts an HF config switch changes (a tensor HF shares between two uses, a renamed head).
    finish_export: (model, HF config dict, exported state) -> None; edits both in place, for
      choices that depend on the weights themselves (writing a shared tensor once) or on the transformers
      version the export is for (the config's `transformers_version`).
    config_for_state: (`Config`, HF state) -> the `Config` the stored tensors call for, where a config key
      alone cannot tell (transformers 5 writes a tied head for a checkpoint that stores it untied).
    logit_scale: whether `config_to_hf` writes `Config.logit_scale` (`to_hf` refuses a scale other than 1
      for the families that have none).
    experts: whether the family has mixture-of-experts layers (`to_hf` refuses `Config.n_experts` for the
      families that have none).
    latent_attention: whether the family's attention is multi-head latent attention (`to_hf` refuses
      `Config.latent_attention` for the families whose attention is not).
    attention_sinks: whether the family's attention has learned sinks (`to_hf` refuses `Config.attention_sinks`
      for the families that have none).
    writes: the per-layer settings `to_hf` refuses for the families that have none and this family writes:
      "attention_chunk" (chunked attention), "qk_norm_kind" (an L2 QK-norm), "qk_norm" (on some layers only),
      "query_temperature" (log-n query scaling);
      and "sigmoid_router" (DeepSeek-V3's router, `Config.sigmoid_router`: glm4_moe); Gemma 4's "kv_sources",
      "per_layer_inputs", "layer_scalars", "value_norm", "logit_softcap", "values_from_keys" and per-layer
      "d_head", "n_kv_heads", "d_ff" (gemma4_text); "attention_output_gate" (gated attention) and "mixer" (gated
      DeltaNet layers): qwen3_next, qwen3_5_text; "shared_expert_gate" (a gated shared expert): qwen3_next.
    """

    model_types: tuple[str, ...]
    config_from_hf: Callable[[dict], Config]
    config_to_hf: Callable[[Config], dict]
    rules: Callable[[Config], list[Rule]]
    ignore: Callable[[Config], tuple[str, ...]] = lambda cfg: ()
    prepare_state: Callable[[Config, dict, dict[str, Tensor]], dict[str, Tensor]] = lambda cfg, hf, state: state
    finish_export: Callable[[nn.Module, dict, dict[str, Tensor]], None] = lambda model, hf, state: None
    config_for_state: Callable[[Config, dict[str, Tensor]], Config] = lambda cfg, state: cfg
    logit_scale: bool = False
    experts: bool = False
    latent_attention: bool = False
    attention_sinks: bool = False
    writes: tuple[str, ...] = ()


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    for model_type in family.model_types:
        FAMILIES[model_type] = family
    return family


def supported() -> list[str]:
    return sorted(FAMILIES)


def family_for(model_type: Any, source: str) -> Family:
    if model_type not in FAMILIES:
        raise UnsupportedCheckpoint(
            f"{source}: model_type {model_type!r} is not supported; supported model types: {', '.join(supported())}"
        )
    return FAMILIES[model_type]


def unsupported(model_type: str, feature: str) -> UnsupportedCheckpoint:
    return UnsupportedCheckpoint(f"{model_type} checkpoint uses {feature}, which posformer does not implement")


def architecture(hf: dict, heads: dict[str, str], default: str) -> str:
    """The posformer head for the first of `hf['architectures']`, via `heads` (class-name suffix -> head).

    A checkpoint without `architectures` gets `default`; an unknown class is an error naming the known ones.
    """
    names = hf.get("architectures") or []
    if not names:
        return default
    name = names[0]
    for suffix, head in heads.items():
        if name.endswith(suffix):
            return head
    raise UnsupportedCheckpoint(
        f"architecture {name!r} is not supported for model_type {hf.get('model_type')!r}; "
        f"supported heads: {', '.join('*' + s for s in heads)}"
    )
