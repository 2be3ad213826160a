"""`posformer bench --memory`'s figure: peak memory against sequence length, one panel per phase, one line per
(model kind, encoding), log-log so that linear growth has slope 1.

Each encoding has one colour and marker; the model kind sets the line: posformer's solid, Hugging Face's dashed
with hollow markers, `--whole-bias` dotted, `--activation-checkpointing` dash-dot, so that the lines of one
encoding read as a family. The labels are those of `bench.memory`'s table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posformer.utils.figure import line_style, pyplot, save_png

# model kind -> (label of encoding E, line style, marker fill, what the line style means in the legend title);
# the fills tell the kinds apart where a line is one point (a single length)
MODEL_KINDS = {
    "posformer": ("{}", "-", "full", "solid: posformer"),
    "hf": ("HF {}", "--", "none", "dashed, hollow markers: Hugging Face"),
    "whole": ("{} whole", ":", "bottom", "dotted, half markers: bias computed whole"),
    "checkpointed": ("{} checkpointed", "-.", "left", "dash-dot: activation checkpointing"),
    "hf checkpointed": ("HF {} checkpointed", "-.", "none", "dash-dot: activation checkpointing"),
}


def _kind(model: str) -> tuple[str, str | tuple, str, str]:
    return MODEL_KINDS.get(model, (f"{model} {{}}", (0, (1, 3)), "top", f"sparse dots: {model}"))


def memory_curves(result: dict[str, Any], phase: str) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """{(model, encoding): [(length, peak MB), ...]} of one phase's measured cells (failed cells left out)."""
    curves: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for cell in result["cells"]:
        if cell["phase"] == phase and "peak_mb" in cell:
            key = (cell["model"], cell["encoding"])
            curves.setdefault(key, []).append((cell["length"], max(cell["peak_mb"], 1.0)))
    return curves


def draw_memory(result: dict[str, Any], path: str | Path) -> Path:
    """One panel per phase of `bench.memory.run`'s result, written to `path` as a PNG."""
    plt = pyplot()
    phases = result["phases"]
    encodings = list(dict.fromkeys(cell["encoding"] for cell in result["cells"]))
    models = list(dict.fromkeys(cell["model"] for cell in result["cells"]))
    lengths = sorted(result["lengths"])
    fig, axes = plt.subplots(
        1, len(phases), figsize=(6.5 * len(phases) + 3.5, 5.0), squeeze=False, layout="constrained"
    )
    for ax, phase in zip(axes[0], phases):
        for (model, encoding), points in memory_curves(result, phase).items():
            label, linestyle, fill, _ = _kind(model)
            style = {**line_style(encodings.index(encoding)), "linestyle": linestyle, "fillstyle": fill}
            found, peaks = zip(*sorted(points))
            ax.plot(found, peaks, label=label.format(encoding), **style)
        ax.set(xscale="log", yscale="log", xlabel="sequence length", ylabel="peak MB above the model", title=phase)
        ax.set_xticks(lengths, [f"{n:,}" for n in lengths])
        ax.set_xlim(lengths[0] / 1.4, lengths[-1] * 1.4)
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.grid(True, which="both", alpha=0.3)
    kinds = "\n".join(dict.fromkeys(_kind(m)[3] for m in models))
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 + len(encodings) // 12, title=kinds)
    return save_png(fig, path)
