"""The one way an experiment's settings are built: a named preset, then overrides, each name checked."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

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
