"""Checks that a `Config` fits a Hugging Face family's fixed layout before `to_hf` writes it."""

from __future__ import annotations

from typing import Any

from posformer.config import Config
from posformer.hf.family import UnsupportedCheckpoint, unsupported

# LLaMA's decoder: pre-RMSNorm (the first layer's too), RoPE, a final norm, no embedding norm or scale, no parallel
# residual, a plain LM head
DECODER_LAYOUT = dict(
    arch="decoder",
    position="rope",
    norm="rmsnorm",
    norm_placement="pre",
    use_final_norm=True,
    embed_norm=False,
    first_attn_norm=True,
    parallel_residual=False,
    scale_embeddings=False,
    type_vocab_size=0,
    head_bias=False,
    head_transform=False,
    scale_tied_head=False,
)
# every layer one full attention without QK-norm: the families that have no per-layer kinds, windows or QK-norm
PLAIN_LAYERS = dict(qk_norm=False, sliding_window=None, layer_types=None)


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


def require_decoder_layout(cfg: Config, model_type: str, **expected: Any) -> None:
    """`require_head` (causal_lm or none) and `require_fields` of `DECODER_LAYOUT`, one stack of `n_layers` (no other
    `n_decoder_layers`), with the family's own `expected` values, which add fields or replace one of the layout's
    (Qwen3-Next's norm)."""
    require_head(cfg, model_type)
    require_fields(cfg, model_type, **{**DECODER_LAYOUT, "decoder_layers": cfg.n_layers, **expected})


def require_default_scale(cfg: Config, model_type: str) -> None:
    """Refuse, by name, an attention scale other than head_dim ** -0.5 (families without a scale of their own)."""
    if abs(cfg.scale - cfg.head_dim**-0.5) > 1e-12:
        raise unsupported(model_type, f"an attention scale other than head_dim ** -0.5: {cfg.scale} (to_hf)")
