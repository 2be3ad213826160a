"""posformer checkpoints: save and load a model as `config.json` + `model.safetensors`, written atomically.

The writer belongs to the model (`pretrained.write_pretrained`, re-exported here as `save_pretrained`), so that
`Transformer.save_pretrained` needs nothing above the model; reading, checked against a manifest, is here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from torch import nn

from posformer.checkpoints.generation_file import read_generation_config
from posformer.checkpoints.manifest import verify_if_present
from posformer.checkpoints.model_dir import model_file, read_json
from posformer.checkpoints.sizes import check_fits, meta_model
from posformer.config import Config
from posformer.model import Transformer
from posformer.pretrained import CONFIG_FILE, WEIGHTS_FILE, config_json
from posformer.pretrained import write_pretrained as save_pretrained

__all__ = [
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "check_checkpoint",
    "check_weights",
    "config_from_json",
    "config_json",
    "load_pretrained",
    "read_config",
    "save_pretrained",
]


def read_config(model_dir: str | Path) -> Config:
    """The `Config` stored in `model_dir`/config.json; a `ValueError` naming the file when it is not one."""
    return config_from_json(read_json(model_dir, CONFIG_FILE), Path(model_dir) / CONFIG_FILE)


def config_from_json(data: dict, path: Path) -> Config:
    """The `Config` of a posformer config.json's contents `data` (read from `path`, named in every error), its
    size fields within their bounds (`utils.limits.MODEL_SIZES`, checked by `Config.validate`)."""
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
        cfg = Config.from_dict(data["posformer"])
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path} holds an invalid posformer config: {err}") from err
    return cfg


def check_weights(model: nn.Module, weights_path: Path) -> None:
    """Check that the safetensors file at `weights_path` holds exactly `model`'s tensors (names and shapes; one
    name of each group of tied tensors suffices), reading only its header: a `ValueError` naming the file."""
    with _open_weights(weights_path) as f:
        _check_shapes(model, _shapes(f, weights_path), weights_path)


def _open_weights(weights_path: Path, device: str = "cpu") -> Any:
    """The safetensors file at `weights_path`, opened (its header read) for tensors on `device`."""
    try:
        return safe_open(str(weights_path), framework="pt", device=device)
    except (SafetensorError, OSError, ValueError) as err:
        raise _unreadable(weights_path, err) from err


def _unreadable(weights_path: Path, err: Exception) -> ValueError:
    return ValueError(f"{weights_path} is truncated or corrupt and cannot be read as safetensors: {err}")


def _shapes(f: Any, weights_path: Path) -> dict[str, tuple[int, ...]]:
    """The names and shapes of the tensors of the open safetensors file `f`, read from its header."""
    try:
        return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise _unreadable(weights_path, err) from err


def _tied_groups(model: nn.Module) -> list[list[str]]:
    """The names of `model`'s tensors, grouped by the tensor they name (tied weights share one)."""
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return list(groups.values())


def _check_shapes(model: nn.Module, stored: dict[str, tuple[int, ...]], weights_path: Path) -> None:
    """A `ValueError` naming `weights_path` unless `stored` (name -> shape) are exactly `model`'s tensors."""
    expected = model.state_dict(keep_vars=True)
    unknown = sorted(set(stored) - set(expected))
    missing = sorted(names[0] for names in _tied_groups(model) if not set(names) & set(stored))
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
    model = meta_model(read_config(model_dir), model_dir / CONFIG_FILE)
    check_weights(model, model_file(model_dir, WEIGHTS_FILE))
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def load_pretrained(
    model_dir: str | Path,
    device: str | None = None,
    changes: dict[str, Any] | None = None,
    checked: Iterable[str] | None = None,
    config: dict | None = None,
) -> Transformer:
    """Load a model written by `save_pretrained` (or a training checkpoint, first checked against its manifest).

    changes: Config fields to change before the model is built once (dropout for fine-tuning, a new head's
    weight); tensors the change adds start as the model initialises them, tensors it removes are left unread,
    every other tensor must be in the file. checked: the files of a manifest to check (None: every file it
    lists, each hashed once); config: config.json's contents when the caller has read them (read once). Every
    file is read through `model_dir.model_file`; a missing file is a `FileNotFoundError`, a corrupt, truncated or
    foreign one a `ValueError` naming it. Nothing is allocated before the config's sizes are checked against
    sane bounds and the weights' header, and the model against the machine's memory (`checkpoints.sizes`).
    """
    model_dir = Path(model_dir)
    config_path, weights_path = model_file(model_dir, CONFIG_FILE), model_file(model_dir, WEIGHTS_FILE)
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: is {model_dir} a posformer checkpoint?")
    verify_if_present(model_dir, required=(CONFIG_FILE, WEIGHTS_FILE), only=None if checked is None else set(checked))
    stored = config_from_json(read_json(model_dir, CONFIG_FILE) if config is None else config, config_path)
    before = meta_model(stored, config_path)  # the names and shapes the file must hold
    generation = read_generation_config(model_dir)  # generate's defaults, checked before any tensor is read
    cfg = stored.replace(**changes) if changes else stored
    with _open_weights(weights_path, device or "cpu") as f:
        _check_shapes(before, _shapes(f, weights_path), weights_path)  # the header only: nothing allocated yet
        check_fits(meta_model(cfg, config_path) if changes else before, config_path)
        model = Transformer(cfg)
        missing = _read_tensors(model, f, weights_path)
    lost = set(before.state_dict()) & set(model.state_dict()) & missing
    if lost:
        raise ValueError(f"{weights_path}: the changes {changes} lost {sorted(lost)[:10]}")
    model.generation_config = generation
    return model


def _read_tensors(model: Transformer, f: Any, weights_path: Path) -> set[str]:
    """Copy the tensors of the open safetensors file `f` (its header checked) that `model` has into it; the
    names of `model`'s tensors it did not hold (a tied name whose tensor it holds under another name aside)."""
    wanted = set(model.state_dict())
    try:
        tensors = {name: f.get_tensor(name) for name in f.keys() if name in wanted}
    except (SafetensorError, OSError, ValueError) as err:
        raise _unreadable(weights_path, err) from err
    model.load_state_dict(tensors, strict=False)
    return {name for names in _tied_groups(model) if not set(names) & set(tensors) for name in names}
