"""Figure 2: the T5 relative-position bucket map (Raffel et al. 2020, section 2.1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from posformer.positions import t5_bucket
from posformer.utils.figure import REFERENCE_COLOR, line_style, pyplot, save_png


def t5_bucket_map(distance: int = 200, num_buckets: int = 32, max_distance: int = 128) -> dict[str, np.ndarray]:
    """The buckets of rel = key_pos - query_pos for rel in [-distance, distance].

    Returns {"rel": (R,), "bidirectional": (R,), "causal": (R,)} integer arrays, R = 2 * distance + 1.
    """
    rel = torch.arange(-distance, distance + 1)
    return {
        "rel": rel.numpy(),
        "bidirectional": t5_bucket(rel, True, num_buckets, max_distance).numpy(),
        "causal": t5_bucket(rel, False, num_buckets, max_distance).numpy(),
    }


def draw_t5_buckets(path: str | Path, distance: int = 200, num_buckets: int = 32, max_distance: int = 128) -> Path:
    """Bucket against relative distance, the bidirectional (encoder) and causal (decoder) forms."""
    data = t5_bucket_map(distance, num_buckets, max_distance)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    n_points = len(data["rel"])
    ax.step(data["rel"], data["bidirectional"], where="mid", label="bidirectional (encoder)", **line_style(0, n_points))
    ax.step(
        data["rel"], data["causal"], where="mid", label="causal / unidirectional (decoder)", **line_style(1, n_points)
    )
    for edge in (-max_distance, max_distance):
        ax.axvline(
            edge,
            color=REFERENCE_COLOR,
            linestyle=":",
            linewidth=1.2,
            label=f"|distance| = max_distance = {max_distance}" if edge > 0 else None,
        )
    ax.set_xlabel("relative position  key - query")
    ax.set_ylabel("bucket")
    ax.set_title(f"T5 relative-position buckets ({num_buckets} buckets, max_distance {max_distance})")
    ax.legend()
    ax.grid(alpha=0.3)
    return save_png(fig, path)
