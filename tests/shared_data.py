"""The project's shared corpora as the tests reach them: through `posformer.data.shared`, wherever the checkout lies."""

from __future__ import annotations

from pathlib import Path

import pytest

from posformer.data.shared import DATA_DIR_ENV, squad_v2_dev


def squad_dev_file() -> Path:
    """The full SQuAD v2 dev file; skips the calling test, saying where it looked, only when the file is absent."""
    path = squad_v2_dev()
    if not path.is_file():
        pytest.skip(f"the SQuAD v2 dev file {path} is absent (${DATA_DIR_ENV} names the folder holding squad_v2/)")
    return path
