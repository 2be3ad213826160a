"""Figure 6: attention maps of trained models on one text, averaged over the heads of one layer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from posformer.model import Transformer
from posformer.utils.figure import pyplot, save_png

if TYPE_CHECKING:
    from posformer.loading import TextTokenizer

MAX_TICK_LABELS = 64


@dataclass
class AttentionMap:
    """probs (T, T): query rows, key columns, mean over heads; tokens: T strings; layer: the 0-based layer."""

    title: str
    tokens: list[str]
    probs: np.ndarray
    layer: int


@torch.no_grad()
def attention_map(
    model: Transformer, tokenizer: "TextTokenizer", text: str, layer: int = -1, title: str = ""
) -> AttentionMap:
    """Self-attention of `layer` (negative counts from the last) of the model's first stack, averaged over heads.

    The text is cut to `cfg.max_positions` tokens. An encoder-decoder model shows its encoder.
    """
    ids = tokenizer.encode(text)[: model.cfg.max_positions]
    if not ids:
        raise ValueError(f"the text {text!r} encodes to no tokens")
    input_ids = torch.tensor([ids])
    if model.cfg.arch == "encoder_decoder":
        _, weights = model.encode(input_ids, output_attentions=True)
    else:
        weights = model(input_ids, output_attentions=True).attentions
    n_layers = len(weights)
    if not -n_layers <= layer < n_layers:
        raise ValueError(f"--layer {layer} is out of range for a stack of {n_layers} layers")
    probs = weights[layer][0].float().mean(dim=0)  # (H, T, T) -> (T, T)
    tokens = [tokenizer.decode([i]) for i in ids]
    return AttentionMap(title or model.cfg.position, tokens, probs.numpy(), layer % n_layers)


def draw_attention(path: str | Path, maps: list[AttentionMap]) -> Path:
    """One heatmap per model, tokens as tick labels when there are at most `MAX_TICK_LABELS`."""
    plt = pyplot()
    cols = min(3, len(maps))
    rows = math.ceil(len(maps) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 5 * rows), squeeze=False, layout="constrained")
    for k, ax in enumerate(axes.flat):
        if k >= len(maps):
            ax.axis("off")
            continue
        amap = maps[k]
        image = ax.imshow(amap.probs, cmap="magma", vmin=0.0, interpolation="nearest")
        ax.set_title(f"{amap.title} (layer {amap.layer})", fontsize=10)
        ax.set_xlabel("key token")
        ax.set_ylabel("query token")
        if len(amap.tokens) <= MAX_TICK_LABELS:
            labels = [repr(t)[1:-1] or " " for t in amap.tokens]
            ticks = range(len(labels))
            ax.set_xticks(ticks, labels, rotation=90, fontsize=6)
            ax.set_yticks(ticks, labels, fontsize=6)
        fig.colorbar(image, ax=ax, shrink=0.8, label="attention probability (mean over heads)")
    fig.suptitle("Attention maps, averaged over heads")
    return save_png(fig, path)
