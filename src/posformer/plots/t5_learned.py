"""Figure 5b: the learned T5 bias of a trained model, per head, against relative distance.

Each stack (encoder, decoder) holds one table `position.table` of shape
(num_buckets, n_heads); the bias of rel = key_pos - query_pos is table[t5_bucket(rel)].
A causal stack only ever sees rel <= 0, so only those distances are shown for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posformer.model import Transformer
from posformer.positions import PositionEncoding
from posformer.positions.contract import Saturating
from posformer.utils.figure import line_style, pyplot, save_png

LINEAR_DISTANCE = 8  # the distance axis is linear within this of 0, logarithmic beyond (T5's buckets are too)


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


def distance_ticks(rel: np.ndarray) -> list[int]:
    """0 and the powers of two from LINEAR_DISTANCE / 2 out, on each side that `rel` reaches."""
    reach = int(np.abs(rel).max())
    powers = [2**k for k in range(int(math.log2(LINEAR_DISTANCE)) - 1, int(math.log2(max(reach, 1))) + 1)]
    return sorted({0, *(-p for p in powers if -p >= rel.min()), *(p for p in powers if p <= rel.max())})


def draw_t5_learned(path: str | Path, panels: list[tuple[str, StackBias]]) -> Path:
    """One panel per (checkpoint name, stack): a step line per head (the bias is constant within a bucket), the
    distance on a symmetric log scale (linear within `LINEAR_DISTANCE` of 0) so that the exact buckets near 0
    and the log-spaced ones far away get room alike."""
    from matplotlib.ticker import NullLocator

    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.8 * len(panels)), squeeze=False, layout="constrained")
    for ax, (name, stack) in zip(axes[:, 0], panels):
        for h, row in enumerate(stack.bias):
            ax.step(stack.rel, row, where="mid", label=f"head {h + 1}", **line_style(h, len(stack.rel)))
        ax.set_xscale("symlog", linthresh=LINEAR_DISTANCE, linscale=1.0)
        ax.set_xticks(distance_ticks(stack.rel))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_title(f"{name}: {stack.label}")
        ax.set_xlabel(f"relative position  key - query  (linear within \u00b1{LINEAR_DISTANCE}, log beyond)")
        ax.set_ylabel("learned bias (logit)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 + len(stack.bias) // 13)
        ax.grid(alpha=0.3, which="major")
    fig.suptitle("Learned T5 relative-position bias per head")
    return save_png(fig, path)
