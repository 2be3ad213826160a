"""Where the project's larger corpora live: ../shared/data beside the repository, or $POSFORMER_DATA_DIR."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "POSFORMER_DATA_DIR"


def default_data_dir() -> Path:
    """$POSFORMER_DATA_DIR, else ../shared/data beside the repository (src/posformer/data/ is three levels in)."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    return Path(__file__).resolve().parents[3].parent / "shared" / "data"


def squad_v2_dev() -> Path:
    """The full SQuAD 2.0 dev set (see its SOURCE.md)."""
    return default_data_dir() / "squad_v2" / "dev-v2.0.reconstructed.json"
