"""The one way an experiment's settings are built (a named preset, then overrides, each name checked) and the
checks of the training knobs the task and extension settings share."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from posformer.train.settings import DEVICES, PRECISIONS
from posformer.utils.validation import check_choice, check_int, check_number

T = TypeVar("T")


def from_preset(
    cls: type[T], presets: dict[str, dict[str, Any]], name: str, overrides: dict[str, Any], label: str
) -> T:
    """cls(**{**presets[name], **overrides}); ValueError prefixed by `label` for an unknown preset or knob."""
    if name not in presets:
        raise ValueError(f"{label}: unknown preset {name!r}; expected one of {', '.join(presets)}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"{label}: unknown setting(s) {unknown}; known: {', '.join(sorted(known))}")
    return cls(**{**presets[name], **overrides})


def check_training_knobs(settings: Any, prefix: str) -> None:
    """The knobs the experiments hand to the Trainer (`trainer_settings`), named `{prefix}{knob}`: lr > 0,
    min_lr_ratio in [0, 1], weight_decay >= 0, warmup and seed >= 0, a device and precision, threads None or >= 1."""
    check_number(f"{prefix}lr", settings.lr, 0.0, low_open=True)
    check_number(f"{prefix}min_lr_ratio", settings.min_lr_ratio, 0.0, 1.0)
    check_number(f"{prefix}weight_decay", settings.weight_decay, 0.0)
    check_int(f"{prefix}warmup", settings.warmup, minimum=0)
    check_int(f"{prefix}seed", settings.seed, minimum=0)
    check_choice(f"{prefix}device", settings.device, DEVICES)
    check_choice(f"{prefix}precision", settings.precision, PRECISIONS)
    if settings.threads is not None:
        check_int(f"{prefix}threads", settings.threads)
