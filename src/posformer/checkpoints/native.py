"""posformer checkpoints: save and load a model as `config.json` + `model.safetensors`, written atomically."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model
from torch import nn

from posformer.checkpoints.manifest import verify_if_present
from posformer.checkpoints.model_dir import model_file, read_json
from posformer.config import Config
from posformer.model import Transformer
from posformer.utils.file_mode import with_umask_mode

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def save_pretrained(model: Transformer, out_dir: str | Path, extra_files: dict[str, str] | None = None) -> Path:
    """Write the model into `out_dir` (created if needed).

    Files are written into a temporary folder beside `out_dir` and moved into
    place one by one with `os.replace`, so a crash never leaves a half-written file.
    `extra_files` maps file names to text contents (a tokenizer, training state).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".saving-", dir=out_dir))
    try:
        save_model(model, str(staging / WEIGHTS_FILE))
        with_umask_mode(staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(config_json(model.cfg))
        for name, text in (extra_files or {}).items():
            (staging / name).write_text(text)
        for item in staging.iterdir():
            os.replace(item, out_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def config_json(cfg: Config) -> str:
    """The text of a posformer config.json: {"posformer": the Config's fields}."""
    return json.dumps({"posformer": cfg.to_dict()}, indent=2) + "\n"


def read_config(model_dir: str | Path) -> Config:
    """The `Config` stored in `model_dir`/config.json; a `ValueError` naming the file when it is not one."""
    data = read_json(model_dir, CONFIG_FILE)
    path = Path(model_dir) / CONFIG_FILE
    if "posformer" not in data:
        raise ValueError(
            f"{path} is not a posformer config (no 'posformer' key); "
            "a Hugging Face checkpoint is read with posformer.from_hf"
        )
    if not isinstance(data["posformer"], dict):
        raise ValueError(
            f"{path}: 'posformer' must be a JSON object of Config fields, got {type(data['posformer']).__name__}"
        )
    try:
        return Config.from_dict(data["posformer"])
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path} holds an invalid posformer config: {err}") from err


def check_weights(model: nn.Module, weights_path: Path) -> None:
    """Check that the safetensors file at `weights_path` holds exactly `model`'s tensors (names and shapes; one
    name of each group of tied tensors suffices), reading only its header: a `ValueError` naming the file."""
    try:
        with safe_open(str(weights_path), framework="pt") as f:
            stored = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{weights_path} is truncated or corrupt and cannot be read as safetensors: {err}") from err
    expected = model.state_dict(keep_vars=True)
    groups: dict[int, list[str]] = {}
    for name, tensor in expected.items():
        groups.setdefault(id(tensor), []).append(name)
    unknown = sorted(set(stored) - set(expected))
    missing = sorted(names[0] for names in groups.values() if not set(names) & set(stored))
    shapes = sorted(
        f"{name} {stored[name]} (expected {tuple(expected[name].shape)})"
        for name in stored
        if name in expected and stored[name] != tuple(expected[name].shape)
    )
    if unknown or missing or shapes:
        problems = [
            f"{label}: {', '.join(names[:10])}"
            for label, names in (("unknown tensors", unknown), ("missing tensors", missing), ("wrong shapes", shapes))
            if names
        ]
        raise ValueError(
            f"{weights_path} does not hold the weights of the model its config.json describes; " + "; ".join(problems)
        )


def check_checkpoint(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Check a posformer checkpoint without loading its weights: its config, and its weights' names and shapes
    (a model built on the meta device). Returns the shapes of the model's tensors by name (tied names
    included); a `ValueError` naming the file that fails."""
    model_dir = Path(model_dir)
    cfg = read_config(model_dir)
    try:
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = Transformer(cfg)
    except (RuntimeError, NotImplementedError):  # a module that needs real numbers to build
        model = Transformer(cfg)
    check_weights(model, model_file(model_dir, WEIGHTS_FILE))
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def load_pretrained(
    model_dir: str | Path, device: str | None = None, changes: dict[str, Any] | None = None
) -> Transformer:
    """Load a model written by `save_pretrained` (or a training checkpoint, first checked against its manifest).

    changes: Config fields to change before the model is built once (dropout for fine-tuning, a new head's
    weight); tensors the change adds start as the model initialises them, tensors it removes are left unread,
    every other tensor must be in the file. Every file is read through `model_dir.model_file`; a missing file is
    a `FileNotFoundError`, a corrupt, truncated or foreign one a `ValueError` naming it.
    """
    model_dir = Path(model_dir)
    config_path, weights_path = model_file(model_dir, CONFIG_FILE), model_file(model_dir, WEIGHTS_FILE)
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: is {model_dir} a posformer checkpoint?")
    verify_if_present(model_dir, required=(CONFIG_FILE, WEIGHTS_FILE))
    stored = read_config(model_dir)
    if not changes:
        model = Transformer(stored)
        check_weights(model, weights_path)
        _read_weights(model, weights_path, device, strict=True)
        return model
    with torch.device("meta"):  # the names and shapes the file must hold
        check_weights(Transformer(stored), weights_path)
    model = Transformer(stored.replace(**changes))
    with torch.device("meta"):
        kept = set(Transformer(stored).state_dict()) & set(model.state_dict())
    missing = _read_weights(model, weights_path, device, strict=False)
    if kept & missing:
        raise ValueError(f"{weights_path}: the changes {changes} lost {sorted(kept & missing)[:10]}")
    return model


def _read_weights(model: Transformer, weights_path: Path, device: str | None, strict: bool) -> set[str]:
    """Read the safetensors file into `model`; the names of the model's tensors it did not hold."""
    try:
        missing, _ = load_model(model, str(weights_path), strict=strict, device=device or "cpu")
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{weights_path} cannot be read as safetensors: {err}") from err
    return set(missing)


Transformer.saver = staticmethod(save_pretrained)  # `Transformer.save_pretrained` (see `posformer.pretrained`)
