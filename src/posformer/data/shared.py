"""Where the project's larger corpora live: ../shared/data beside the repository, or $POSFORMER_DATA_DIR.

A dataset NAME lies in DATA_DIR/NAME/; `posformer data fetch NAME --to DATA_DIR` downloads it there
(`posformer.data.fetch`), and an error about a missing dataset says so (`fetch_hint`)."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "POSFORMER_DATA_DIR"


def default_data_dir() -> Path:
    """$POSFORMER_DATA_DIR, else ../shared/data beside the repository (src/posformer/data/ is three levels in)."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    return Path(__file__).resolve().parents[3].parent / "shared" / "data"


def fetch_hint(name: str, data_dir: str | Path) -> str:
    """What to do when the dataset `name` is missing from `data_dir`: the command that fetches it there."""
    return f"run `posformer data fetch {name} --to {data_dir}`, or point ${DATA_DIR_ENV} at a folder that holds {name}/"


def squad_v2_dev() -> Path:
    """The full SQuAD 2.0 dev set (see its SOURCE.md)."""
    return default_data_dir() / "squad_v2" / "dev-v2.0.reconstructed.json"
