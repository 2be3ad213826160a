"""Training checkpoints that survive crashes: atomic, checksummed, the last K kept, resumed with fallback.

Layout: OUTPUT_DIR/checkpoints/step-00000100/ holds
  model.safetensors, config.json (+ task files such as tokenizer.json)  a loadable model
  trainer_state.pt   optimizer, scheduler, RNG states, data position (read with weights_only=True)
  manifest.json      the step and the SHA-256 and size of every other file, written last

A checkpoint is written into a hidden temporary folder, every file fsync-ed, then
the folder is renamed into place (atomic on POSIX) and the parent fsync-ed. A
kill at any moment leaves either the previous checkpoints only, or the new one
complete. On resume every file is checked against the manifest; a checkpoint
that fails (truncated, corrupt, incomplete) is reported and the previous one is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_model
from torch import nn

from posformer.posformer_checkpoint import CONFIG_FILE, WEIGHTS_FILE

STATE_FILE = "trainer_state.pt"
MANIFEST = "manifest.json"
PREFIX = "step-"


class CorruptCheckpoint(ValueError):
    """A checkpoint whose files do not match its manifest, or that cannot be read."""


@dataclass
class Checkpoint:
    step: int
    path: Path


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path) -> dict:
    """Check every file of the checkpoint at `path` against its manifest; return the manifest."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CorruptCheckpoint(f"{path}: no {MANIFEST} (the write did not finish)")
    try:
        manifest = json.loads(manifest_path.read_text())
        files = {name: (int(entry["bytes"]), str(entry["sha256"])) for name, entry in manifest["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # not UTF-8, not JSON, or not its layout
        raise CorruptCheckpoint(f"{manifest_path} is unreadable: {err}") from err
    unlisted = sorted({WEIGHTS_FILE, CONFIG_FILE, STATE_FILE} - set(files))
    if unlisted:
        raise CorruptCheckpoint(f"{manifest_path} does not list {unlisted}")
    for name, (expected_bytes, expected_sha256) in files.items():
        file = path / name
        if not file.is_file():
            raise CorruptCheckpoint(f"{file} is missing")
        size = file.stat().st_size
        if size != expected_bytes:
            raise CorruptCheckpoint(f"{file} has {size} bytes, the manifest says {expected_bytes} (truncated?)")
        if _sha256(file) != expected_sha256:
            raise CorruptCheckpoint(f"{file} does not match its SHA-256 checksum (corrupt)")
    return manifest


class _StateDict:
    """A state dict as safetensors' `save_model` reads a module (it calls only `state_dict()`)."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.tensors)


class CheckpointManager:
    """Save, list, verify and load the checkpoints of one run directory."""

    def __init__(self, output_dir: str | os.PathLike, keep_last: int, log: Callable[[str], None] = print) -> None:
        self.root = Path(output_dir) / "checkpoints"
        self.keep_last = keep_last
        self.log = log

    def checkpoints(self) -> list[Checkpoint]:
        """Every finished-looking checkpoint folder, newest first (not yet verified)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            if path.is_dir() and path.name.startswith(PREFIX) and path.name[len(PREFIX):].isdigit():
                found.append(Checkpoint(int(path.name[len(PREFIX):]), path))
        return sorted(found, key=lambda c: c.step, reverse=True)

    def save(self, step: int, model: nn.Module | dict[str, torch.Tensor], config_json: str, state: dict,
             extra_files: dict[str, str] | None = None) -> Path:
        """Write checkpoint `step` atomically and prune to the newest `keep_last`. Returns its path.

        `model` is the module, or its full state dict (gathered from FSDP shards) with
        tied names sharing one tensor; either way tied tensors are stored once.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"{PREFIX}{step:08d}"
        staging = self.root / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            save_model(model if isinstance(model, nn.Module) else _StateDict(model), str(staging / WEIGHTS_FILE))
            (staging / CONFIG_FILE).write_text(config_json)
            for name, text in (extra_files or {}).items():
                (staging / name).write_text(text)
            torch.save(state, staging / STATE_FILE)
            files = {}
            for file in sorted(staging.iterdir()):
                _fsync(file)
                files[file.name] = {"sha256": _sha256(file), "bytes": file.stat().st_size}
            (staging / MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=1))
            _fsync(staging / MANIFEST)
            _fsync(staging)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
            _fsync(self.root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.prune()
        return final

    def prune(self) -> None:
        for old in self.checkpoints()[self.keep_last:]:
            doomed = self.root / f".tmp-delete-{old.path.name}"  # a kill mid-delete leaves a .tmp-* folder only
            shutil.rmtree(doomed, ignore_errors=True)
            os.replace(old.path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    def remove_partial_writes(self) -> None:
        """Delete temporary folders left by a write that was killed."""
        if self.root.is_dir():
            for path in self.root.glob(".tmp-*"):
                shutil.rmtree(path, ignore_errors=True)

    def latest_valid(self) -> tuple[Checkpoint, dict] | None:
        """The newest checkpoint that verifies, with its trainer state; says which ones were skipped and why."""
        for checkpoint in self.checkpoints():
            try:
                verify(checkpoint.path)
                state = torch.load(checkpoint.path / STATE_FILE, map_location="cpu", weights_only=True)
            except (CorruptCheckpoint, OSError, RuntimeError, ValueError) as err:
                self.log(f"checkpoint {checkpoint.path} is unusable ({err}); falling back to the previous one")
                continue
            if state.get("step") != checkpoint.step:
                self.log(f"checkpoint {checkpoint.path} holds step {state.get('step')}, not {checkpoint.step}; "
                         "falling back to the previous one")
                continue
            return checkpoint, state
        return None
