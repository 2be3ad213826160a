"""The models behind `--checkpoint`: run directories, or experiment directories of row runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from posformer.experiments.layout import ExperimentLayout
from posformer.model import Transformer


@dataclass
class LoadedCheckpoint:
    """A model directory, a short name for figure titles, and its model (eval mode)."""

    path: Path
    name: str
    model: Transformer


def expand_checkpoints(paths: list[str | Path]) -> list[tuple[Path, str]]:
    """Each path, or for an experiment directory (`ExperimentLayout.is_experiment`) each row's run, sorted.

    Returns (directory, name) pairs; raises `FileNotFoundError` naming a path that is not a directory.
    """
    out = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise FileNotFoundError(f"--checkpoint {path}: no such directory")
        layout = ExperimentLayout(path)
        if layout.is_experiment():
            found = layout.row_dirs()
            if not found:
                raise FileNotFoundError(f"--checkpoint {path}: experiment directory with an empty {layout.rows_dir}")
            out.extend((p, f"{path.name}/{p.name}") for p in found)
        else:
            out.append((path, path.name))
    return out


def load_checkpoints(paths: list[str | Path]) -> list[LoadedCheckpoint]:
    """Expand and load every checkpoint; a directory that does not load raises `ValueError` naming it."""
    from posformer.loading import load_model

    loaded = []
    for path, name in expand_checkpoints(paths):
        try:
            model = load_model(path)
        except Exception as err:
            raise ValueError(f"--checkpoint {path} does not load as a model: {type(err).__name__}: {err}") from err
        loaded.append(LoadedCheckpoint(path, name, model))
    return loaded
