"""Figure 5b: the learned T5 bias of a trained model, per head, against relative distance.

Each stack (encoder, decoder) holds one table `position.table` of shape
(num_buckets, n_heads); the bias of rel = key_pos - query_pos is table[t5_bucket(rel)].
A causal stack only ever sees rel <= 0, so only those distances are shown for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posformer.model import Transformer
from posformer.positions import PositionEncoding
from posformer.positions.contract import Saturating
from posformer.utils.figure import pyplot, save_png


@dataclass
class StackBias:
    """The learned bias of one stack: rel (R,) and bias (H, R)."""

    label: str
    rel: np.ndarray
    bias: np.ndarray


def t5_stacks(model: Transformer) -> list[tuple[str, PositionEncoding]]:
    """The (stack name, encoding) pairs whose distance bias saturates (T5's buckets); empty otherwise."""
    stacks = [(name, getattr(model, name, None)) for name in ("encoder", "decoder")]
    return [(name, s.position) for name, s in stacks if s is not None and isinstance(s.position, Saturating)]


def t5_learned_bias(model: Transformer, distance: int | None = None) -> list[StackBias]:
    """Per T5 stack: rel in [-distance, distance] (causal: [-distance, 0]) and table[t5_bucket(rel)].T (H, R).

    distance defaults to 1.5 * max_distance, past the point where the buckets saturate.
    """
    out = []
    for name, position in t5_stacks(model):
        reach = distance if distance is not None else position.saturation_distance * 3 // 2
        rel = torch.arange(-reach, 1 if position.causal else reach + 1)
        bias = position.distance_bias(rel).detach().float()  # (H, R)
        kind = "causal" if position.causal else "bidirectional"
        out.append(StackBias(f"{name} ({kind})", rel.numpy(), bias.numpy()))
    return out


def draw_t5_learned(path: str | Path, panels: list[tuple[str, StackBias]]) -> Path:
    """One panel per (checkpoint name, stack): a line per head."""
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.6 * len(panels)), squeeze=False, layout="constrained")
    for ax, (name, stack) in zip(axes[:, 0], panels):
        for h, row in enumerate(stack.bias):
            ax.plot(stack.rel, row, linewidth=1, label=f"head {h + 1}")
        ax.set_title(f"{name}: {stack.label}", fontsize=10)
        ax.set_xlabel("relative position  key - query")
        ax.set_ylabel("learned bias (logit)")
        ax.legend(fontsize=7, ncol=4)
        ax.grid(alpha=0.3)
    fig.suptitle("Learned T5 relative-position bias per head")
    return save_png(fig, path)
