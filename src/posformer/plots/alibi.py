"""Figure 5a: ALiBi's fixed bias per head (Press et al. 2022): -m_h * (i - j) for keys j <= query i."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from posformer.positions import alibi_slopes
from posformer.utils.figure import pyplot, save_png


def alibi_bias_maps(n_heads: int = 8, seq_len: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """The slopes (H,) and the causal bias maps (H, T, T): -slope_h * (i - j) for j <= i, NaN (masked) above."""
    slopes = alibi_slopes(n_heads).double().numpy()
    i = np.arange(seq_len)
    distance = (i[:, None] - i[None, :]).astype(np.float64)  # (T, T): query i, key j
    maps = -slopes[:, None, None] * distance[None]
    maps[:, distance < 0] = np.nan
    return slopes, maps


def draw_alibi(path: str | Path, n_heads: int = 8, seq_len: int = 32) -> Path:
    """One heatmap per head on a shared colour scale; masked (future) keys are left blank."""
    slopes, maps = alibi_bias_maps(n_heads, seq_len)
    plt = pyplot()
    cols = min(4, n_heads)
    rows = math.ceil(n_heads / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False, layout="constrained")
    low = float(np.nanmin(maps))
    for h, ax in enumerate(axes.flat):
        if h >= n_heads:
            ax.axis("off")
            continue
        image = ax.imshow(maps[h], cmap="viridis", vmin=low, vmax=0.0, interpolation="nearest")
        ax.set_title(f"head {h + 1}: m = {slopes[h]:.4g}", fontsize=9)
        if h + cols >= n_heads:
            ax.set_xlabel("key position j")
        if h % cols == 0:
            ax.set_ylabel("query position i")
    fig.colorbar(image, ax=axes, label="bias -m_h (i - j)  (blank: masked)")
    fig.suptitle(f"ALiBi bias per head (causal, {n_heads} heads, length {seq_len})")
    return save_png(fig, path)
