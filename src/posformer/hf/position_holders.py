"""Which Hugging Face families can hold a position encoding: what `to_hf` names when a model's encoding is what
stops its export (BLOOM for ALiBi, T5 for T5's buckets, BERT for relative_key, ...; none for FIRE).

Derived, never declared: a model type holds an encoding when its family's `config_to_hf` accepts the family's own
default model (transformers' default config of that model type, read by the family's `config_from_hf`) with the
encoding and its parameters put in. A model type the installed transformers has no default config for, or whose
defaults posformer does not read, is not asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from posformer.config import Config
from posformer.hf.family import FAMILIES, UnsupportedCheckpoint, supported


@lru_cache(maxsize=None)
def default_model(model_type: str) -> Config | None:
    """The family's own default model: transformers' default config of `model_type` as the family reads it; None
    where the installed transformers has no default config of that type or the family refuses its defaults."""
    from transformers import AutoConfig

    try:
        hf_config = AutoConfig.for_model(model_type).to_dict()
        return FAMILIES[model_type].config_from_hf(hf_config).replace(hf_model_type=model_type)
    except (UnsupportedCheckpoint, ValueError, KeyError):
        return None


def holds(model_type: str, position: str, params: Mapping[str, Any] | None = None) -> bool | None:
    """Whether `model_type`'s checkpoints hold `position` with `params` (None: with the family's own parameters
    where its default model has that encoding, else with the encoding's defaults); None where its default model is
    not known."""
    base = default_model(model_type)
    if base is None:
        return None
    if params is None:
        params = base.position_params if base.position == position else {}
    try:
        FAMILIES[model_type].config_to_hf(base.replace(position=position, position_params=dict(params)))
    except (UnsupportedCheckpoint, ValueError):
        return False
    return True


def holders(position: str, params: Mapping[str, Any] | None = None) -> list[str]:
    """The model types whose checkpoints hold `position` with `params` (None: with parameters of their own), by
    name."""
    return [model_type for model_type in supported() if holds(model_type, position, params)]


def position_refusal(cfg: Config, model_type: str) -> str | None:
    """Why `model_type` cannot write `cfg` when its position encoding is the reason: a sentence naming the
    families that hold the encoding, or saying that none does; None when `model_type` holds the encoding (or
    cannot be asked), so that the reason is another."""
    if holds(model_type, cfg.position, cfg.position_params) is not False:
        return None
    return f"{model_type} checkpoints cannot hold position {cfg.position!r}; {where_held(cfg)}"


def where_held(cfg: Config) -> str:
    """Which families hold `cfg.position` with its position_params (else with parameters of their own), or that
    none does."""
    found = holders(cfg.position, cfg.position_params)
    if found:
        return f"the Hugging Face families that hold position {cfg.position!r}: {', '.join(found)}"
    found = holders(cfg.position)
    if found:
        return (
            f"the Hugging Face families that hold position {cfg.position!r} hold it with other position_params "
            f"than {dict(cfg.position_params)}: {', '.join(found)}"
        )
    return (
        f"no Hugging Face family posformer writes holds position {cfg.position!r}: save the model with "
        "save_pretrained (posformer's own format) instead"
    )
