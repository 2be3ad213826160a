"""Reading the files a user names (run configs, Config files, results, predictions): every failure is a
`ValueError` or `FileNotFoundError` that names the file and says what was expected.

    data = read_yaml_file(path, "run config")     # YAML 1.2 numbers (1e-3 is a float)
    data = read_json_file(path, "predictions file")

Files inside a model directory go through `posformer.checkpoints.model_dir`, which also keeps them inside it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading 1e-3 as a number as YAML 1.2 does (YAML 1.1 needs 1.0e-3)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, where: str = "YAML text") -> Any:
    """The value of YAML `text` (safe: no Python objects); `ValueError` naming `where` and the line on a syntax
    error."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"{where} is not valid YAML{at}: {problem}") from None


def read_text_file(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of the file at `path`, which a message calls `what` ("run config")."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
    if not path.is_file():
        raise ValueError(f"{what} {path} is not a file: expected a text file")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{what} {path} is not UTF-8 text (byte {err.start}): expected a text file") from None
    except OSError as err:
        raise ValueError(f"{what} {path} cannot be read: {err.strerror or err}") from None


def read_yaml_file(path: str | os.PathLike, what: str) -> Any:
    """The YAML value of the file at `path` (None for an empty file)."""
    return parse_yaml(read_text_file(path, what), f"{what} {path}")


def read_json_file(path: str | os.PathLike, what: str) -> Any:
    """The JSON value of the file at `path` (a UTF-8 byte-order mark is allowed, as SQuAD files carry one)."""
    text = read_text_file(path, what).removeprefix("\ufeff")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{what} {path} is not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        ) from None


def read_mapping_file(path: str | os.PathLike, what: str) -> dict:
    """A JSON (`.json`) or YAML (any other suffix) file that must hold a mapping."""
    data = read_json_file(path, what) if Path(path).suffix == ".json" else read_yaml_file(path, what)
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path}: expected a mapping, got {type(data).__name__}")
    return data
