"""Figures 3 and 4: RoPE's long-range decay and its per-pair wavelengths (Su et al., RoFormer).

Decay (section 3.4.3): with theta_i = base^(-2i/d) and S_j = sum_{i<j} exp(1j * r * theta_i),
the bound on |q . R_r k| is proportional to (1/(d/2)) * sum_{j=1}^{d/2} |S_j|, which is
(d/2 + 1)/2 at r = 0 (32.5 for d = 128) and falls, oscillating, as the distance r grows.

Wavelengths: pair i (1-based) turns by theta_{i-1} per position, a full rotation every
lambda_i = 2*pi * base^(2(i-1)/d) positions. Pairs whose wavelength exceeds the training
length never complete a rotation during training.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posformer.utils.figure import REFERENCE_COLOR, line_style, plain_number, pyplot, save_png

DECAY_BASES = (500.0, 10000.0, 500000.0)
WAVELENGTH_BASES = (500.0, 10000.0, 500000.0, 1e6)


def rope_decay(dim: int = 128, base: float = 10000.0, max_distance: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Relative distances r = 0 .. max_distance (R,) and the mean |S_j| at each (R,), float64."""
    r = np.arange(max_distance + 1, dtype=np.float64)
    theta = base ** (-2.0 * np.arange(dim // 2, dtype=np.float64) / dim)  # (d/2,)
    partial_sums = np.cumsum(np.exp(1j * r[:, None] * theta[None, :]), axis=1)  # (R, d/2): S_1 .. S_{d/2}
    return r, np.abs(partial_sums).mean(axis=1)


def rope_wavelengths(head_dim: int = 128, bases: tuple[float, ...] = WAVELENGTH_BASES) -> dict[float, np.ndarray]:
    """base -> lambda_i = 2*pi * base^(2(i-1)/head_dim) for pairs i = 1 .. head_dim/2: (head_dim/2,) float64."""
    exponents = 2.0 * np.arange(head_dim // 2, dtype=np.float64) / head_dim
    return {base: 2.0 * np.pi * base**exponents for base in bases}


def draw_rope_decay(
    path: str | Path, dim: int = 128, bases: tuple[float, ...] = DECAY_BASES, max_distance: int = 256
) -> Path:
    """The decay curve against relative distance, one line per base."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, base in enumerate(bases):
        r, value = rope_decay(dim, base, max_distance)
        ax.plot(r, value, label=f"base {plain_number(base)}", **line_style(k, len(r)))
    ax.set_xlabel("relative distance r = m - n")
    ax.set_ylabel(r"$(2/d)\, \sum_j\, |S_j|$")
    ax.set_title(f"RoPE long-range decay (RoFormer 3.4.3), d = {dim}")
    ax.legend()
    ax.grid(alpha=0.3)
    return save_png(fig, path)


def draw_rope_wavelengths(
    path: str | Path, head_dim: int = 128, bases: tuple[float, ...] = WAVELENGTH_BASES, train_len: int = 128
) -> Path:
    """Wavelength per rotary pair on a log scale, one line per base, the training length as a horizontal line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    pairs = np.arange(1, head_dim // 2 + 1)
    for k, (base, wavelengths) in enumerate(rope_wavelengths(head_dim, bases).items()):
        ax.plot(pairs, wavelengths, label=f"base {plain_number(base)}", **line_style(k, len(pairs)))
    ax.axhline(
        train_len,
        color=REFERENCE_COLOR,
        linestyle=":",
        linewidth=1.2,
        label=f"training length {train_len}: pairs above never complete a rotation",
    )
    ax.set_yscale("log")
    ax.set_xlabel(f"rotary pair i (head dim {head_dim})")
    ax.set_ylabel(r"wavelength $2\pi\, b^{2(i-1)/H}$ (positions)")
    ax.set_title("RoPE wavelength per dimension pair")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    return save_png(fig, path)
