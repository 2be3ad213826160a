"""Checks that a `Config` fits a Hugging Face family's fixed layout before `to_hf` writes it."""

from __future__ import annotations

from typing import Any

from posformer.config import Config
from posformer.hf.family import UnsupportedCheckpoint


def require_fields(cfg: Config, model_type: str, **expected: Any) -> None:
    """Raise `UnsupportedCheckpoint` naming every `Config` field whose value the family cannot express.

    `expected` maps a field (or a derived property such as `head_dim`) to the one value the family has.
    """
    wrong = [
        f"Config.{name}={getattr(cfg, name)!r} (needs {value!r})"
        for name, value in expected.items()
        if getattr(cfg, name) != value
    ]
    if wrong:
        raise UnsupportedCheckpoint(f"to_hf: a {model_type} checkpoint cannot express " + ", ".join(wrong))


def require_head(cfg: Config, model_type: str, heads: tuple[str, ...] = ("causal_lm", "none")) -> None:
    if cfg.head_kind not in heads:
        raise UnsupportedCheckpoint(
            f"to_hf: {model_type} export supports heads {', '.join(heads)}; this model has head {cfg.head_kind!r}"
        )
