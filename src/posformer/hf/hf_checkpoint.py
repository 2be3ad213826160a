"""Reading and writing the files of a Hugging Face checkpoint directory.

Weights are read from, in order of preference: `model.safetensors`, a sharded
`model.safetensors.index.json`, `pytorch_model.bin`, a sharded
`pytorch_model.bin.index.json`. A `.bin` file is only ever read with
`torch.load(..., weights_only=True)`: no arbitrary object is unpickled. Every file is
read through `model_dir.model_file`: a shard index may not name a file outside the directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from posformer.checkpoints.model_dir import model_file, read_json
from posformer.checkpoints.sizes import memory_bytes
from posformer.pretrained import remove_other_weights
from posformer.utils.file_limits import not_blank
from posformer.utils.file_mode import with_umask_mode
from posformer.utils.safe_write import make_dirs

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"
# What a Hub download fetches: config, safetensors weights and tokenizer files (.bin only when no safetensors).
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.spm"]
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: missing, truncated, corrupt or of the wrong kind."""


class MissingCheckpoint(CheckpointError):
    """A checkpoint that is neither a local directory nor a Hub id that could be downloaded."""


def is_hub_id(name: str) -> bool:
    """Whether `name` has the form of a Hugging Face Hub model id, `org/name` (letters, digits, '-', '_', '.')."""
    return HUB_ID.fullmatch(name) is not None


def resolve(path_or_hub_id: str | os.PathLike) -> Path:
    """A local checkpoint directory: `path_or_hub_id` itself, or a Hub snapshot downloaded into the cache.

    A path that does not exist is tried on the Hub only when it has the form `org/name`; otherwise it is a
    `MissingCheckpoint` at once ("no such file or directory: PATH"), and an `org/name` that cannot be
    downloaded either says both. An empty or blank path is a `MissingCheckpoint` too (it would otherwise stand
    for the current directory).
    """
    try:
        path = Path(not_blank(path_or_hub_id, "the checkpoint"))
    except ValueError as err:
        raise MissingCheckpoint(str(err)) from None
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{path} is a file; expected a checkpoint directory holding {CONFIG}")
    name = os.fspath(path_or_hub_id)
    missing = f"{name} does not exist (no such file or directory: {name})"
    if not is_hub_id(name):
        raise MissingCheckpoint(f"{missing}, and it is not a Hugging Face Hub id (org/name) to download")
    try:
        return download(name)
    except Exception as err:  # offline, unknown repo, no permission: all end here
        raise MissingCheckpoint(
            f"{missing}, and it could not be downloaded from the Hugging Face Hub "
            f"({type(err).__name__}: {err}). Offline, pass the path of a downloaded checkpoint directory."
        ) from err


def download(hub_id: str) -> Path:
    """The Hub snapshot of model `hub_id` in the local cache, downloaded when absent: config, safetensors and
    tokenizer files (.bin weights only when the repository has no safetensors)."""
    from huggingface_hub import snapshot_download

    directory = Path(snapshot_download(hub_id, allow_patterns=HUB_PATTERNS))
    if not any((directory / f).is_file() for f in (SAFETENSORS, SAFETENSORS_INDEX)):
        directory = Path(snapshot_download(hub_id, allow_patterns=[*HUB_PATTERNS, "*.bin"]))
    return directory


def read_config(directory: Path) -> dict:
    path = model_file(directory, CONFIG)
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist: {directory} is not a Hugging Face checkpoint")
    return read_json(directory, CONFIG, error=CheckpointError)


def _check_memory(path: Path) -> None:
    """A `CheckpointError` when the weights file at `path` is larger than the machine's memory (it is then never
    read: a sparse file of a few bytes on disk can claim any size)."""
    size, memory = path.stat().st_size, memory_bytes()
    if memory is not None and size > memory:
        raise CheckpointError(
            f"{path} is {size:,} bytes, more than this machine's {memory:,} bytes of memory: it cannot be loaded"
        )


def _load_safetensors(path: Path) -> dict[str, Tensor]:
    _check_memory(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path} is truncated or corrupt and cannot be read as safetensors: {err}") from err


def _load_bin(path: Path) -> dict[str, Tensor]:
    _check_memory(path)
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # pickle and zip errors have many types
        raise CheckpointError(
            f"{path} cannot be read with torch.load(weights_only=True): {type(err).__name__}: {err}. "
            "posformer never unpickles arbitrary objects; convert the file to safetensors."
        ) from err
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a flat dict of tensors")
    return state


def _weight_map(directory: Path, index_name: str) -> dict[str, str]:
    """The `weight_map` of a shard index: tensor name -> shard file name."""
    index_path = directory / index_name
    weight_map = read_json(directory, index_name, error=CheckpointError).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(
            f"{index_path} is not a valid shard index: expected a 'weight_map' object mapping "
            f"tensor names to shard file names, got {type(weight_map).__name__}"
        )
    return weight_map


def _load_sharded(directory: Path, index_name: str, load) -> dict[str, Tensor]:
    index_path = directory / index_name
    weight_map = _weight_map(directory, index_name)
    state: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = model_file(directory, shard, source=index_path)
        if not shard_path.is_file():
            raise CheckpointError(f"shard {shard_path} named in {index_path.name} does not exist")
        state.update(load(shard_path))
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise CheckpointError(f"{index_path} lists tensors that no shard holds: {missing[:10]}")
    return state


def read_state(directory: Path) -> dict[str, Tensor]:
    """Every tensor of the checkpoint in `directory`, on the CPU, keyed by its Hugging Face name.

    Every file is read through `model_dir.model_file`: a shard named by an absolute path, a `..` or a
    symlink that leads outside the directory is refused.
    """
    if model_file(directory, SAFETENSORS).is_file():
        return _load_safetensors(directory / SAFETENSORS)
    if model_file(directory, SAFETENSORS_INDEX).is_file():
        return _load_sharded(directory, SAFETENSORS_INDEX, _load_safetensors)
    if model_file(directory, BIN).is_file():
        return _load_bin(directory / BIN)
    if model_file(directory, BIN_INDEX).is_file():
        return _load_sharded(directory, BIN_INDEX, _load_bin)
    raise CheckpointError(
        f"{directory} holds no weights: expected one of {SAFETENSORS}, {SAFETENSORS_INDEX}, {BIN}, {BIN_INDEX}"
    )


def write_checkpoint(out_dir: str | os.PathLike, config: dict, state: dict[str, Tensor]) -> Path:
    """Write `config.json` and `model.safetensors` into `out_dir`, each file atomically.

    Both are written into a temporary folder inside `out_dir`, then moved into place with
    `os.replace`, so a crash never leaves a half-written file under either name, and a symlink at either name is
    replaced, never written through. Weights of another layout left from an earlier write are removed.
    """
    out_dir = make_dirs(out_dir)
    staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=out_dir))
    try:
        tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
        save_file(tensors, str(staging / SAFETENSORS), metadata={"format": "pt"})
        with_umask_mode(staging / SAFETENSORS)
        (staging / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        for name in (SAFETENSORS, CONFIG):
            os.replace(staging / name, out_dir / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    remove_other_weights(out_dir, SAFETENSORS)
    return out_dir
