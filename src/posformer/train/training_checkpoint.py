"""Training checkpoints that survive crashes: atomic, checksummed, the last K kept, resumed with fallback.

Layout: OUTPUT_DIR/checkpoints/step-00000100/ holds
  model.safetensors, config.json (+ task files such as tokenizer.json)  a loadable model
  trainer_state.pt   optimizer, scheduler, RNG states, data position (read with weights_only=True)
  manifest.json      the step and the SHA-256 and size of every other file, written last

A checkpoint is written into a hidden temporary folder, every file fsync-ed, then
the folder is renamed into place (atomic on POSIX) and the parent fsync-ed. A
kill at any moment leaves either the previous checkpoints only, or the new one
complete. On resume every file is checked against the manifest, the trainer state's
structure (`trainer_state`) and the weights against the config; a checkpoint that fails
(truncated, corrupt, incomplete, tampered) is reported and the previous one is used.
Loading a checkpoint as a model (`checkpoints.native.load_pretrained`, through `posformer.loading`) checks the
manifest too: the model's files only when a run directory stands for the checkpoint, never its trainer state.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_model
from torch import nn

from posformer.checkpoints import manifest as checkpoint_manifest
from posformer.checkpoints.manifest import MANIFEST, CorruptCheckpoint
from posformer.checkpoints.manifest import sha256 as _sha256
from posformer.checkpoints.model_dir import model_file
from posformer.checkpoints.native import CONFIG_FILE, WEIGHTS_FILE, check_checkpoint
from posformer.train.trainer_state import check_trainer_state
from posformer.utils.file_mode import with_umask_mode
from posformer.utils.safe_write import check_extra_files, make_dirs, write_text_atomic

STATE_FILE = "trainer_state.pt"
PREFIX = "step-"
__all__ = ["Checkpoint", "CheckpointManager", "CorruptCheckpoint", "MANIFEST", "STATE_FILE", "load_state", "verify"]


@dataclass
class Checkpoint:
    step: int
    path: Path


def check_checkpoint_files(extra_files: dict[str, str]) -> None:
    """The names of files to write into every checkpoint beside the model (a tokenizer's files) are plain file
    names, none of the checkpoint's own: `../x` would leave the staging folder (through a link planted beside it).
    A ValueError naming the entry otherwise."""
    check_extra_files(extra_files, (WEIGHTS_FILE, CONFIG_FILE, STATE_FILE, MANIFEST), "checkpoint")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def verify(path: Path) -> dict:
    """Check every file of the checkpoint at `path` against its manifest; return the manifest."""
    return checkpoint_manifest.verify(path, required=(WEIGHTS_FILE, CONFIG_FILE, STATE_FILE))


def _reason(err: Exception) -> str:
    """The gist of a torch.load error: the unpickler's own words, not its advice to drop weights_only."""
    text = str(err)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation", 1)[0]
    return f"{type(err).__name__}: {' '.join(text.split())}".rstrip(": ")


def load_state(checkpoint: Checkpoint) -> dict:
    """The verified trainer state of `checkpoint` (weights_only: no code runs), its structure checked, and its
    config and weights checked against each other; a `CorruptCheckpoint` naming the file and field otherwise."""
    verify(checkpoint.path)
    try:
        shapes = check_checkpoint(checkpoint.path)
    except (ValueError, OSError) as err:
        raise CorruptCheckpoint(str(err)) from err
    file = checkpoint.path / STATE_FILE
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a foreign file
            warnings.simplefilter("ignore", UserWarning)
            state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling, zip and EOF errors have many types; weights_only refuses any code
        raise CorruptCheckpoint(
            f"{file} cannot be read with torch.load(weights_only=True), which refuses anything "
            f"but tensors and plain containers (tampered or truncated?): {_reason(err)}"
        ) from err
    return check_trainer_state(state, file, checkpoint.step, shapes)


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
            if path.is_dir() and path.name.startswith(PREFIX) and path.name[len(PREFIX) :].isdigit():
                found.append(Checkpoint(int(path.name[len(PREFIX) :]), path))
        return sorted(found, key=lambda c: c.step, reverse=True)

    def save(
        self,
        step: int,
        model: nn.Module | dict[str, torch.Tensor],
        config_json: str,
        state: dict,
        extra_files: dict[str, str] | None = None,
    ) -> Path:
        """Write checkpoint `step` atomically and prune to the newest `keep_last`. Returns its path.

        `model` is the module, or its full state dict (gathered from FSDP shards) with
        tied names sharing one tensor; either way tied tensors are stored once. `extra_files` ({name: text},
        written as UTF-8) must be plain file names other than the checkpoint's own (`check_checkpoint_files`).
        """
        check_checkpoint_files(extra_files or {})
        make_dirs(self.root, self.root.parent)  # checkpoints/ is a real folder of the run, not a link out of it
        final = self.root / f"{PREFIX}{step:08d}"
        staging = self.root / f".tmp-{final.name}-{os.getpid()}"
        _remove(staging)
        staging.mkdir()  # a new folder: every file below is written in it
        try:
            save_model(model if isinstance(model, nn.Module) else _StateDict(model), str(staging / WEIGHTS_FILE))
            with_umask_mode(staging / WEIGHTS_FILE)
            write_text_atomic(staging / CONFIG_FILE, config_json, staging)
            for name, text in (extra_files or {}).items():
                write_text_atomic(staging / name, text, staging)
            torch.save(state, staging / STATE_FILE)
            files = {}
            for file in sorted(staging.iterdir()):
                _fsync(file)
                files[file.name] = {"sha256": _sha256(file), "bytes": file.stat().st_size}
            (staging / MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=1))
            _fsync(staging / MANIFEST)
            _fsync(staging)
            _remove(final)
            os.replace(staging, final)
            _fsync(self.root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.prune()
        return final

    def prune(self) -> None:
        """Delete all but the newest `keep_last` checkpoints (a symlinked one: the link only)."""
        for old in self.checkpoints()[self.keep_last :]:
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
        """The newest checkpoint that verifies, with its trainer state; says which ones were skipped and why.

        A checkpoint is skipped when a file fails its manifest, when the trainer state cannot be read or lacks a
        field the trainer needs, or when the weights are unreadable or do not fit the config beside them.
        """
        for checkpoint in self.checkpoints():
            try:
                model_file(self.root, checkpoint.path.name)
                return checkpoint, load_state(checkpoint)
            except (OSError, RuntimeError, ValueError) as err:  # CorruptCheckpoint is a ValueError
                self.log(f"checkpoint {checkpoint.path} is unusable ({err}); falling back to the previous one")
        return None


def _remove(path: Path) -> None:
    """Delete the folder at `path` with what it holds; a symlink there is removed itself, never followed."""
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
