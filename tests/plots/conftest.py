"""The figure tests' shared fixture: the figures the drawing functions save, kept for inspection."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from posformer.utils import figure


@pytest.fixture
def keep_drawn(monkeypatch) -> Callable[..., list]:
    """`keep_drawn(*modules)`: a list that each figure the modules save (through `save_png`) joins, drawn again after
    saving so its text and artists can be read."""

    def keep_from(*modules: ModuleType) -> list:
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

    return keep_from
