"""`posformer bench --memory`'s figure: peak memory against sequence length, one panel per phase, one line per
model (posformer's encodings solid, Hugging Face's dashed), log-log so that linear growth has slope 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posformer.utils.figure import pyplot, save_png


def memory_curves(result: dict[str, Any], phase: str) -> dict[str, list[tuple[int, float]]]:
    """{label: [(length, peak MB), ...]} of one phase's measured cells (failed cells left out)."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for cell in result["cells"]:
        if cell["phase"] == phase and "peak_mb" in cell:
            label = cell["encoding"] if cell["model"] == "posformer" else f"HF {cell['encoding']}"
            curves.setdefault(label, []).append((cell["length"], max(cell["peak_mb"], 1.0)))
    return curves


def draw_memory(result: dict[str, Any], path: str | Path) -> Path:
    """One panel per phase of `bench.memory.run`'s result, written to `path` as a PNG."""
    plt = pyplot()
    phases = result["phases"]
    fig, axes = plt.subplots(1, len(phases), figsize=(6.4 * len(phases), 4.8), squeeze=False, layout="constrained")
    for ax, phase in zip(axes[0], phases):
        for label, points in memory_curves(result, phase).items():
            lengths, peaks = zip(*sorted(points))
            ax.plot(lengths, peaks, "--" if label.startswith("HF ") else "-", marker="o", label=label)
        ax.set(xscale="log", yscale="log", xlabel="sequence length", ylabel="peak MB above the model", title=phase)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return save_png(fig, path)
