"""The figure tests' shared helper: the figures the drawing functions save, kept for inspection."""

from __future__ import annotations

from types import ModuleType

import pytest

from posformer.utils import figure


def keep_saved_figures(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> list:
    """A list that each figure the `modules` save (through their `save_png`) joins, drawn again after saving so
    its text and artists can be read."""
    figures = []
    real_save = figure.save_png

    def keep(fig, path):
        out = real_save(fig, path)
        fig.canvas.draw()
        figures.append(fig)
        return out

    for module in modules:
        monkeypatch.setattr(module, "save_png", keep)
    return figures
