"""A model directory is a boundary: every file read through one stays inside it.

    path = model_file(directory, "model.safetensors")        # refused if it could lead outside
    data = read_json(directory, "config.json")               # a JSON object, or a ValueError naming the file

A name is refused (`ValueError` naming the file) when it is absolute, has a `..` part, or leads,
symlinks followed, to a file outside the directory: a model directory never hands out a secret
file elsewhere on the machine. The one exception is the Hugging Face hub cache, whose snapshots
(`models--org--name/snapshots/<rev>/<file>`) are symlinks into the same repository's
`models--org--name/blobs/` folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath, PureWindowsPath

HUB_REPO_PREFIX = "models--"


class OutsideModelDir(ValueError):
    """A file name that could lead outside its model directory: absolute, with `..`, or an escaping symlink."""


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def allowed_roots(directory: str | os.PathLike) -> list[Path]:
    """Where the files of `directory` may really live: the directory itself, and for a hub cache snapshot
    its repository's blobs/ folder."""
    root = Path(os.path.realpath(directory))
    roots = [root]
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith(HUB_REPO_PREFIX):
        roots.append(Path(os.path.realpath(root.parent.parent / "blobs")))
    return roots


def model_file(directory: str | os.PathLike, name: str | os.PathLike, source: str | os.PathLike | None = None) -> Path:
    """The path of file `name` inside model directory `directory` (it need not exist).

    Raises `OutsideModelDir` (a `ValueError`) when `name` is absolute, has a `..` part, or is (or lies under) a symlink
    whose target is outside the directory. `source`: the file that named `name` (a shard index, a
    manifest), quoted in the error.
    """
    directory, text = Path(directory), os.fspath(name)
    where = f" (named in {source})" if source is not None else ""
    parts = PurePosixPath(text.replace("\\", "/")).parts
    if (
        not text
        or PurePosixPath(text).is_absolute()
        or PureWindowsPath(text).is_absolute()
        or PureWindowsPath(text).drive
        or ".." in parts
    ):
        raise OutsideModelDir(
            f"{text!r}{where} is refused: expected a file name inside the model directory "
            f"{directory} (no absolute path, no '..')"
        )
    path = directory / text
    real = Path(os.path.realpath(path))
    if not any(_inside(real, root) for root in allowed_roots(directory)):
        raise OutsideModelDir(
            f"{path}{where} is refused: it is a symlink to {real}, outside the model directory "
            f"{directory}; expected a file inside it"
        )
    return path


def read_json(directory: str | os.PathLike, name: str, error: type[ValueError] = ValueError) -> dict:
    """The JSON object in file `name` of `directory` (through `model_file`).

    Raises `FileNotFoundError` when it does not exist, `error` (a `ValueError`) naming the file when
    it is not UTF-8, not JSON, or not a JSON object.
    """
    path = model_file(directory, name)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{path} is not valid JSON: {err}") from err
    except OSError as err:
        raise error(f"{path} cannot be read: {err}") from err
    if not isinstance(data, dict):
        raise error(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data
