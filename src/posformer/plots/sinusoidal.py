"""Figure 1: sinusoidal encoding tables for several bases N (Vaswani et al. 2017, section 3.5).

Pair i of the table oscillates with wavelength 2*pi * N^(2i/d): the larger N, the
longer the periods, so fewer dimensions complete a cycle over the same positions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posformer.positions import sinusoidal_table
from posformer.utils.figure import label_outer_panels, panel_grid, pyplot, save_png, shared_colorbar

BASES = (100.0, 1000.0, 10000.0)


def sinusoidal_tables(
    bases: tuple[float, ...] = BASES, n_positions: int = 1000, dim: int = 500
) -> dict[float, np.ndarray]:
    """base N -> its table PE (n_positions, dim): PE[p, 2i] = sin(p / N^(2i/dim)), PE[p, 2i+1] = cos(...)."""
    return {base: sinusoidal_table(n_positions, dim, base).numpy() for base in bases}


def draw_sinusoidal(path: str | Path, tables: dict[float, np.ndarray] | None = None) -> Path:
    """One heatmap per base: position (rows) against dimension (columns), one colour bar.

    The tables hold more positions and dimensions than the panels have pixels: they are drawn antialiased, so
    that the fastest dimensions read as their average (white) instead of as moire arcs that are not in the data.
    """
    tables = sinusoidal_tables() if tables is None else tables
    plt = pyplot()
    fig, axes = panel_grid(plt, len(tables), len(tables), (5.0, 5.0))
    for ax, (base, table) in zip(axes, tables.items()):
        image = ax.imshow(
            table, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="antialiased", interpolation_stage="data"
        )
        ax.set_title(f"N = {base:,g}")
    label_outer_panels(axes, len(tables), f"dimension (d = {table.shape[1]})", "position")
    shared_colorbar(fig, image, axes, "PE value (sin / cos)")
    fig.suptitle("Sinusoidal position encoding: the periods lengthen as the base N grows")
    return save_png(fig, path)
