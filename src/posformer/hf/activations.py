"""Hugging Face activation names (`transformers.activations.ACT2FN` keys) <-> posformer's `Config.activation`.

For the non-gated feed-forward of GPT-2, GPT-NeoX and their kin. "gelu_new",
"gelu_fast" and "gelu_pytorch_tanh" are all the tanh approximation of GELU
(they differ by float rounding only); "gelu" is the exact (erf) GELU.
"""

from __future__ import annotations

from posformer.hf.family import UnsupportedCheckpoint, unsupported

FROM_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu", "swish": "silu"}


def activation_from_hf(model_type: str, name: str) -> str:
    """The posformer activation for HF's `name`; `UnsupportedCheckpoint` naming it otherwise."""
    if name not in FROM_HF:
        raise unsupported(model_type, f"activation {name!r} (supported: {', '.join(FROM_HF)})")
    return FROM_HF[name]


def activation_to_hf(model_type: str, ours: str) -> str:
    """The HF activation name for posformer's `ours` (tanh-GELU is written as "gelu_new")."""
    if ours not in TO_HF:
        raise UnsupportedCheckpoint(
            f"to_hf: {model_type} has no activation for Config.activation={ours!r} (exportable: {', '.join(TO_HF)})"
        )
    return TO_HF[ours]
