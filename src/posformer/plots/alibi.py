"""Figure 5a: ALiBi's fixed bias per head (Press et al. 2022): -m_h * (i - j) for keys j <= query i."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from posformer.positions import alibi_slopes
from posformer.utils.figure import label_outer_panels, panel_grid, pyplot, save_png, shared_colorbar


def alibi_bias_maps(n_heads: int = 8, seq_len: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """The slopes (H,) and the causal bias maps (H, T, T): -slope_h * (i - j) for j <= i, NaN (masked) above."""
    slopes = alibi_slopes(n_heads).double().numpy()
    i = np.arange(seq_len)
    distance = (i[:, None] - i[None, :]).astype(np.float64)  # (T, T): query i, key j
    maps = -slopes[:, None, None] * distance[None]
    maps[:, distance < 0] = np.nan
    return slopes, maps


def slope_label(slope: float) -> str:
    """m = 1/16 where 1/m is a whole number (every power-of-two head count), else m = 0.397."""
    inverse = 1.0 / slope
    return f"m = 1/{round(inverse)}" if abs(inverse - round(inverse)) < 1e-6 else f"m = {slope:.3g}"


def draw_alibi(path: str | Path, n_heads: int = 8, seq_len: int = 32) -> Path:
    """One heatmap per head on one shared colour scale; masked (future) keys are left blank.

    The slopes fall geometrically from head to head, so the scale is symmetric-logarithmic (linear within the
    smallest slope of 0): on a linear scale every head past the third would be one flat colour.
    """
    from matplotlib.colors import SymLogNorm

    slopes, maps = alibi_bias_maps(n_heads, seq_len)
    plt = pyplot()
    columns = min(4, n_heads)
    fig, axes = panel_grid(plt, n_heads, columns, (3.2, 3.1))
    norm = SymLogNorm(linthresh=float(slopes.min()), linscale=0.5, vmin=float(np.nanmin(maps)), vmax=0.0, base=10)
    for h, ax in enumerate(axes):
        image = ax.imshow(maps[h], cmap="viridis", norm=norm, interpolation="nearest")
        ax.set_title(f"head {h + 1}: {slope_label(float(slopes[h]))}")
    label_outer_panels(axes, columns, "key position j", "query position i")
    bar = shared_colorbar(fig, image, axes, r"bias $-m_h\,(i - j)$  (symmetric log scale)")
    decades = range(math.ceil(math.log10(norm.linthresh)), math.floor(math.log10(-norm.vmin)) + 1)
    bar.set_ticks([0.0] + [-(10.0**k) for k in decades])
    fig.suptitle(f"ALiBi bias per head (causal, {n_heads} heads, length {seq_len}; blank: masked)")
    return save_png(fig, path)
