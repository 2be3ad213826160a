"""The manifest of a checkpoint: `manifest.json` lists the SHA-256 and size of every other file.

A training checkpoint (`train.training_checkpoint`) writes one last; wherever a directory holding a
manifest is loaded (a model, its tokenizer, its training state) the files read are checked against it
first, so a truncated or tampered file is reported by name instead of being loaded. A manifest.json that is not
a regular file (a FIFO, a directory) is an error, never "no manifest", whichever way the checkpoint is reached.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable

from posformer.checkpoints.model_dir import model_file
from posformer.utils.file_limits import CONFIG, read_limited
from posformer.utils.user_files import parse_json

MANIFEST = "manifest.json"


class CorruptCheckpoint(ValueError):
    """A checkpoint whose files do not match its manifest, or that cannot be read."""


def sha256(path: Path) -> str:
    """The SHA-256 hex digest of the file at `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(path: Path) -> tuple[dict, dict[str, tuple[int, str]]]:
    try:
        manifest_path = model_file(path, MANIFEST)
    except ValueError as err:
        raise CorruptCheckpoint(str(err)) from err
    if not os.path.lexists(manifest_path):
        raise CorruptCheckpoint(f"{path}: no {MANIFEST} (the write did not finish)")
    try:
        data = read_limited(manifest_path, str(manifest_path), CONFIG)
    except FileNotFoundError:  # a symlink to nothing
        raise CorruptCheckpoint(f"{manifest_path} is a broken symlink: expected a file") from None
    except ValueError as err:  # not a regular file (a FIFO, a directory), or over the limit
        raise CorruptCheckpoint(str(err)) from None
    try:
        manifest = parse_json(data.decode("utf-8"), MANIFEST)
        files = {str(name): (int(entry["bytes"]), str(entry["sha256"])) for name, entry in manifest["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as err:  # not UTF-8, not JSON, not its layout
        raise CorruptCheckpoint(f"{manifest_path} is unreadable: {err}") from err
    return manifest, files


def verify(path: Path, required: Iterable[str] = (), only: Iterable[str] | None = None) -> dict:
    """Check the files of the checkpoint at `path` against its manifest; return the manifest.

    required: names the manifest must list; only: check just these names (those the manifest lists),
    None: every listed file. Raises `CorruptCheckpoint` naming the file that failed.
    """
    path = Path(path)
    manifest, files = _entries(path)
    unlisted = sorted(set(required) - set(files))
    if unlisted:
        raise CorruptCheckpoint(f"{path / MANIFEST} does not list {unlisted}")
    for name, (expected_bytes, expected_sha256) in files.items():
        if only is not None and name not in only:
            continue
        try:
            file = model_file(path, name, source=path / MANIFEST)
        except ValueError as err:
            raise CorruptCheckpoint(str(err)) from err
        if not file.is_file():
            raise CorruptCheckpoint(f"{file} is missing")
        size = file.stat().st_size
        if size != expected_bytes:
            raise CorruptCheckpoint(f"{file} has {size} bytes, the manifest says {expected_bytes} (truncated?)")
        if sha256(file) != expected_sha256:
            raise CorruptCheckpoint(f"{file} does not match its SHA-256 checksum in {MANIFEST} (corrupt)")
    return manifest


def has_manifest(path: Path) -> bool:
    """Whether `path` holds a manifest: anything under that name (a file, a link of any kind, a FIFO, a directory),
    checked without opening it; `verify` then reads it, or refuses what is not a regular file."""
    return os.path.lexists(Path(path) / MANIFEST)


def verify_if_present(path: Path, required: Iterable[str] = (), only: Iterable[str] | None = None) -> None:
    """`verify` the directory at `path` when it holds a manifest; a directory without one is left alone."""
    if has_manifest(path):
        verify(path, required, only)
