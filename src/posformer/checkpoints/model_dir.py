"""A model directory is a boundary: every file read through one stays inside it.

    path = model_file(directory, "model.safetensors")        # refused if it could lead outside
    data = read_json(directory, "config.json")               # a JSON object, or a ValueError naming the file

A name is refused (`ValueError` naming the file) when it is absolute, has a `..` part, or leads,
symlinks followed, to a file outside the directory: a model directory never hands out a secret
file elsewhere on the machine. The one exception is the Hugging Face hub cache, whose snapshots
(`models--org--name/snapshots/<rev>/<file>`) are symlinks into the same repository's
`models--org--name/blobs/` folder. That folder is trusted only when it is a real directory (not a symlink) of
the repository folder, and the snapshot's own path is taken with its symlinks followed, so neither `blobs` nor
`snapshots` can be a link that leads elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from posformer.utils.file_limits import CONFIG, TOKENIZER, read_limited
from posformer.utils.user_files import parse_json, regular_file

HUB_REPO_PREFIX = "models--"
TOKENIZER_JSON_FILES = ("tokenizer.json", "vocab.json", "added_tokens.json")  # read under the tokenizer's limit


class OutsideModelDir(ValueError):
    """A file name that could lead outside its model directory: absolute, with `..`, or an escaping symlink."""


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _hub_blobs(root: Path) -> Path | None:
    """The blobs/ folder of the hub cache repository whose snapshot is the real path `root`, or None when `root`
    is no snapshot (`models--*/snapshots/<rev>`) or blobs/ is not a real directory (a symlink is never trusted)."""
    snapshots, repo = root.parent, root.parent.parent
    if snapshots.name != "snapshots" or not repo.name.startswith(HUB_REPO_PREFIX):
        return None
    blobs = repo / "blobs"
    if blobs.is_symlink() or not blobs.is_dir():
        return None
    return blobs


def allowed_roots(directory: str | os.PathLike) -> list[Path]:
    """Where the files of `directory` may really live: the directory itself (its symlinks followed), and for a
    hub cache snapshot its repository's blobs/ folder (`_hub_blobs`)."""
    root = Path(os.path.realpath(directory))
    blobs = _hub_blobs(root)
    return [root] if blobs is None else [root, blobs]


def model_file(directory: str | os.PathLike, name: str | os.PathLike, source: str | os.PathLike | None = None) -> Path:
    """The path of file `name` inside model directory `directory` (it need not exist).

    Raises `OutsideModelDir` (a `ValueError`) when `name` is absolute, has a `..` part, or is (or lies under) a symlink
    whose target is outside the directory; a `ValueError` when it is a FIFO, device or socket. `source`: the file
    that named `name` (a shard index, a manifest), quoted in the error.
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
    if real.exists() and not real.is_dir():
        regular_file(path, f"{path}{where}")  # a FIFO or device would block, or never end, when read
    return path


def read_json(directory: str | os.PathLike, name: str, error: type[ValueError] = ValueError) -> dict:
    """The JSON object in file `name` of `directory` (through `model_file`, read by `user_files.parse_json`).

    Raises `FileNotFoundError` when it does not exist, `error` (a `ValueError`) naming the file when
    it is not a regular file, larger than its kind's limit (`file_limits`: a tokenizer's vocabulary, else a
    config's), not UTF-8, not JSON (or JSON nested too deeply, with an integer too long to read or
    a lone surrogate), or not a JSON object.
    """
    path = model_file(directory, name)
    limit = TOKENIZER if name in TOKENIZER_JSON_FILES else CONFIG
    try:
        data = parse_json(read_limited(regular_file(path, str(path)), str(path), limit).decode("utf-8"), str(path))
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as err:
        raise error(f"{path} is not valid JSON: {err}") from err
    except OSError as err:
        raise error(f"{path} cannot be read: {err}") from err
    except ValueError as err:
        raise error(str(err)) from err
    if not isinstance(data, dict):
        raise error(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data
