"""Which Hugging Face family can write a model that was not loaded from one (`convert --to-hf`, `to_hf`).

A family fits a `Config` when its `config_to_hf` accepts the config and its `config_from_hf` reads the result back
as the same model: every field equal once the spellings of one value are resolved (d_head None or the width it
stands for, n_kv_heads None or n_heads, head None or the arch's default), training-only fields aside (dropouts and
the initialisation, which a checkpoint does not carry). The plain families are tried first, so a RoPE + RMSNorm +
SwiGLU decoder is written as llama, not as a family that happens to read the same.
"""

from __future__ import annotations

from typing import Any

from posformer.config import Config
from posformer.hf.family import FAMILIES, UnsupportedCheckpoint, supported
from posformer.hf.position_holders import holders, position_refusal, where_held

PREFERRED = ("llama", "gpt2", "bert", "t5", "gpt_neox", "qwen2", "qwen3", "mistral", "roberta")
TRAINING_ONLY = ("hf_model_type", "dropout", "attention_dropout", "activation_dropout", "init", "init_std")


def _resolved(cfg: Config) -> dict[str, Any]:
    """cfg's fields with one spelling per value (see the module docstring), without the training-only ones."""
    fields = cfg.to_dict()
    fields.update(d_head=cfg.head_dim, n_kv_heads=cfg.kv_heads, head=cfg.head_kind)
    return {k: v for k, v in fields.items() if k not in TRAINING_ONLY}


def differing_fields(cfg: Config, back: Config) -> list[str]:
    """The fields in which `back` (`cfg` written by a family and read back) describes another model than `cfg`."""
    ours, theirs = _resolved(cfg), _resolved(back)
    return [k for k in ours if ours[k] != theirs.get(k)]


def _misfit(cfg: Config, model_type: str) -> str | None:
    """Why `model_type` cannot write `cfg` (None when it can)."""
    candidate = cfg.replace(hf_model_type=model_type)
    family = FAMILIES[model_type]
    try:
        back = family.config_from_hf(family.config_to_hf(candidate))
    except (UnsupportedCheckpoint, ValueError) as err:
        return str(err)
    differ = differing_fields(candidate, back)
    return f"it reads back other {', '.join(differ)}" if differ else None


def infer_family(cfg: Config, requested: str | None = None) -> str:
    """The model_type to write `cfg` as: `requested` when given (refused, with the reason, when it does not fit),
    else `cfg.hf_model_type` when set, else the first family that fits (`PREFERRED`, then the others by name).
    `UnsupportedCheckpoint` naming why the preferred families, and those that hold its position encoding, do not fit
    when none does, and which families hold the encoding (`position_holders`), or that none does."""
    if requested is not None:
        if requested not in FAMILIES:
            raise UnsupportedCheckpoint(f"hf_model_type {requested!r}: expected one of {', '.join(supported())}")
        reason = _misfit(cfg, requested)
        if reason is not None:
            refusal = position_refusal(cfg, requested)
            reason = reason if refusal is None else f"{refusal} ({reason})"
            raise UnsupportedCheckpoint(f"hf_model_type {requested!r} cannot write this model: {reason}")
        return requested
    if cfg.hf_model_type is not None:
        return cfg.hf_model_type
    order = list(PREFERRED) + [t for t in supported() if t not in PREFERRED]
    reasons = {}
    for model_type in order:
        reason = _misfit(cfg, model_type)
        if reason is None:
            return model_type
        reasons[model_type] = reason
    asked = dict.fromkeys([*PREFERRED[:4], *holders(cfg.position, cfg.position_params)])  # and why its holders fail
    shown = "; ".join(f"{t}: {reasons[t]}" for t in asked)
    raise UnsupportedCheckpoint(
        f"no Hugging Face family writes this model (arch={cfg.arch!r}, position={cfg.position!r}, "
        f"norm={cfg.norm!r}, activation={cfg.activation!r}). Its position: {where_held(cfg)}. Why each does not "
        f"fit: {shown}"
    )
