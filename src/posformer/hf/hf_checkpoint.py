"""Reading and writing the files of a Hugging Face checkpoint directory.

Weights are read from, in order of preference: `model.safetensors`, a sharded
`model.safetensors.index.json`, `pytorch_model.bin`, a sharded
`pytorch_model.bin.index.json`. A `.bin` file is only ever read with
`torch.load(..., weights_only=True)`: no arbitrary object is unpickled.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"
# What a Hub download fetches: config, safetensors weights and tokenizer files (.bin only when no safetensors).
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.spm"]


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: missing, truncated, corrupt or of the wrong kind."""


def resolve(path_or_hub_id: str | os.PathLike) -> Path:
    """A local checkpoint directory: `path_or_hub_id` itself, or a Hub snapshot downloaded into the cache."""
    path = Path(path_or_hub_id)
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{path} is a file; expected a checkpoint directory holding {CONFIG}")
    name = str(path_or_hub_id)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise CheckpointError(f"checkpoint directory {name} does not exist")
    try:
        from huggingface_hub import snapshot_download

        directory = Path(snapshot_download(name, allow_patterns=HUB_PATTERNS))
        if not any((directory / f).is_file() for f in (SAFETENSORS, SAFETENSORS_INDEX)):
            directory = Path(snapshot_download(name, allow_patterns=[*HUB_PATTERNS, "*.bin"]))
        return directory
    except Exception as err:  # offline, unknown repo, no permission: all end here
        raise CheckpointError(
            f"{name!r} is not a local directory and could not be downloaded from the Hugging Face Hub "
            f"({type(err).__name__}: {err}). Offline, pass the path of a downloaded checkpoint directory."
        ) from err


def read_config(directory: Path) -> dict:
    path = directory / CONFIG
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist: {directory} is not a Hugging Face checkpoint")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _load_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path} is truncated or corrupt and cannot be read as safetensors: {err}") from err


def _load_bin(path: Path) -> dict[str, Tensor]:
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


def _load_sharded(index_path: Path, load) -> dict[str, Tensor]:
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{index_path} is not a valid shard index (needs a 'weight_map'): {err}") from err
    state: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = index_path.parent / shard
        if not shard_path.is_file():
            raise CheckpointError(f"shard {shard_path} named in {index_path.name} does not exist")
        state.update(load(shard_path))
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise CheckpointError(f"{index_path.name} lists tensors that no shard holds: {missing[:10]}")
    return state


def read_state(directory: Path) -> dict[str, Tensor]:
    """Every tensor of the checkpoint in `directory`, on the CPU, keyed by its Hugging Face name."""
    if (directory / SAFETENSORS).is_file():
        return _load_safetensors(directory / SAFETENSORS)
    if (directory / SAFETENSORS_INDEX).is_file():
        return _load_sharded(directory / SAFETENSORS_INDEX, _load_safetensors)
    if (directory / BIN).is_file():
        return _load_bin(directory / BIN)
    if (directory / BIN_INDEX).is_file():
        return _load_sharded(directory / BIN_INDEX, _load_bin)
    raise CheckpointError(
        f"{directory} holds no weights: expected one of {SAFETENSORS}, {SAFETENSORS_INDEX}, {BIN}, {BIN_INDEX}"
    )


def write_checkpoint(out_dir: str | os.PathLike, config: dict, state: dict[str, Tensor]) -> Path:
    """Write `config.json` and `model.safetensors` into `out_dir`, each file atomically.

    Both are written into a temporary folder inside `out_dir`, then moved into place with
    `os.replace`, so a crash never leaves a half-written file under either name.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=out_dir))
    try:
        tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
        save_file(tensors, str(staging / SAFETENSORS), metadata={"format": "pt"})
        (staging / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        for name in (SAFETENSORS, CONFIG):
            os.replace(staging / name, out_dir / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir
