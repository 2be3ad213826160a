"""Figure 6: attention maps of trained models on one text, averaged over the heads of one layer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from posformer.model import Transformer
from posformer.utils.figure import MIN_FONT_SIZE, label_outer_panels, panel_grid, pyplot, save_png, shared_colorbar

if TYPE_CHECKING:
    from posformer.loading import TextTokenizer

MAX_TICK_LABELS = 64
TOKEN_SPACING = 0.15  # inches of panel per token when the tokens are labelled: room for a 9-point label
MAX_PANEL = 8.5  # inches; at MAX_TICK_LABELS tokens that still leaves room for 7-point labels
MAX_FIGURE_WIDTH = 18.0  # inches; more panels go on further lines
PROBABILITY_TICKS = (0.0, 0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0)  # on the square-root scale, small ones too
VISIBLE_SPACE = "\u2423"  # a space in a token label, drawn as an open box so that " was" does not read "was"


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


def token_label(token: str) -> str:
    """A token as a tick label: control characters escaped (\\n), spaces drawn as an open box."""
    return repr(token)[1:-1].replace(" ", VISIBLE_SPACE) or "''"


def draw_attention(path: str | Path, maps: list[AttentionMap]) -> Path:
    """One heatmap per model on one colour scale with one colour bar; tokens as tick labels when there are at most
    `MAX_TICK_LABELS`, each panel sized to leave them readable. Colour: the square root of the probability, so
    that the many small weights stay visible next to a strong first-token sink; blank: probability 0 (masked)."""
    from matplotlib.colors import PowerNorm

    if not maps:
        raise ValueError("draw_attention: maps is empty; give at least one AttentionMap")
    longest = max(len(amap.tokens) for amap in maps)
    labelled = longest <= MAX_TICK_LABELS
    side = min(MAX_PANEL, max(4.0, TOKEN_SPACING * longest + 1.0)) if labelled else 5.0
    columns = max(1, min(3, int(MAX_FIGURE_WIDTH // side)))
    font = max(MIN_FONT_SIZE, min(9.0, 0.85 * 72 * (side - 1.0) / longest))  # 85% of the spacing, in points
    plt = pyplot()
    fig, axes = panel_grid(plt, len(maps), columns, (side, side + 0.6))
    norm = PowerNorm(gamma=0.5, vmin=0.0, vmax=max(float(amap.probs.max()) for amap in maps))
    for ax, amap in zip(axes, maps):
        image = ax.imshow(np.ma.masked_equal(amap.probs, 0.0), cmap="magma", norm=norm, interpolation="nearest")
        ax.set_title(f"{amap.title} (layer {amap.layer})")
        if len(amap.tokens) <= MAX_TICK_LABELS:
            labels = [token_label(t) for t in amap.tokens]
            ticks = range(len(labels))
            ax.set_xticks(ticks, labels, rotation=90, fontsize=font)
            ax.set_yticks(ticks, labels, fontsize=font)
    label_outer_panels(axes, columns, "key token", "query token")
    bar = shared_colorbar(fig, image, axes, "attention probability, mean over heads (square-root scale)")
    bar.set_ticks([t for t in PROBABILITY_TICKS if t <= norm.vmax])
    fig.suptitle("Attention maps, averaged over heads (blank: masked)")
    return save_png(fig, path)
