"""Reading the files a user names (run configs, Config files, results, predictions): every failure is a
`ValueError` or `FileNotFoundError` that names the file and says what was expected.

    data = read_yaml_file(path, "run config")     # YAML 1.2 numbers (1e-3 is a float)
    data = read_json_file(path, "predictions file")

All YAML posformer reads goes through `parse_yaml`, which refuses a document whose aliases would expand it beyond
`MAX_ALIAS_NODES` nodes (a "billion laughs" bomb) or that refers to itself, before any value is built. All JSON
of user files goes through `parse_json`, which names the file for text that is not JSON, nested too deeply or with
an integer too long to read. Both refuse a string holding a lone surrogate (`posformer.utils.unicode_text`), and
`regular_file` refuses a FIFO, device or directory given as a file ("is not a regular file"), and an empty path.
Every file is read through `file_limits.read_limited`, with the size limit of its kind (a config or settings file
by default: `file_limits.CONFIG`).

Files inside a model directory go through `posformer.checkpoints.model_dir`, which also keeps them inside it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from posformer.utils.file_limits import CONFIG, SizeLimit, file_kind, not_blank, read_limited
from posformer.utils.unicode_text import check_texts

MAX_ALIAS_NODES = 100_000  # the values that aliases may add to a document: far beyond any config, far below a bomb


class _AliasRefused(yaml.YAMLError):
    """A document whose aliases expand it too far, or make it contain itself."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading 1e-3 as a number as YAML 1.2 does (YAML 1.1 needs 1.0e-3), that checks what
    a document's aliases expand to before building its values."""

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        sizes: dict[int, int] = {}
        added = _expanded_size(node, sizes, set()) - len(sizes)
        if added > MAX_ALIAS_NODES:
            raise _AliasRefused(
                f"its aliases (*name) repeat {added:,} values, more than {MAX_ALIAS_NODES:,} (a YAML alias bomb?); "
                "expected a document without such repetition"
            )
        return node


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many nodes `node` stands for with every alias expanded (`sizes`: memo by node id; `open_nodes`: the
    nodes being counted, one reached again is an alias to a node that contains it)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise _AliasRefused("an alias (*name) refers to a node that contains it; expected a document without cycles")
    open_nodes.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = node.value if isinstance(node, yaml.SequenceNode) else []
    sizes[key] = 1 + sum(_expanded_size(child, sizes, open_nodes) for child in children)
    open_nodes.discard(key)
    return sizes[key]


def parse_yaml(text: str, where: str = "YAML text") -> Any:
    """The value of YAML `text` (safe: no Python objects); `ValueError` naming `where` and the line on a syntax
    error, and naming `where` for an alias bomb, a document that contains itself or one nested too deeply."""
    try:
        value = yaml.load(text, Loader=_Loader)
    except _AliasRefused as err:
        raise ValueError(f"{where} is refused: {err}") from None
    except RecursionError:
        raise ValueError(
            f"{where} is refused: it is nested too deeply; expected a few levels of lists and mappings"
        ) from None
    except ValueError as err:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ValueError(f"{where} is refused: {_number_problem(err)}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"{where} is not valid YAML{at}: {problem}") from None
    check_texts(value, where, text)
    return value


def parse_json(text: str, where: str) -> Any:
    """The JSON value of `text`; `ValueError` naming `where` (a file, "stdin line 3") and what is wrong: not JSON
    (the line and column), nested too deeply, an integer too long to read, or a string with a lone surrogate."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} is not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise ValueError(
            f"{where} is refused: it is nested too deeply; expected a few levels of lists and objects"
        ) from None
    except ValueError as err:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ValueError(f"{where} is refused: {_number_problem(err)}") from None
    check_texts(value, where, text)
    return value


def _number_problem(err: ValueError) -> str:
    """What a `ValueError` raised while reading JSON or YAML says, in words: Python reads an integer of at most
    `sys.get_int_max_str_digits()` digits."""
    if "integer string conversion" in str(err):
        return (
            f"it holds an integer of more than {sys.get_int_max_str_digits()} digits; expected numbers of an "
            "ordinary size"
        )
    return str(err)


def regular_file(path: str | os.PathLike, name: str, directory: bool = False) -> Path:
    """`path` when it is a regular file (symlinks followed), or with `directory` a directory. `FileNotFoundError`
    "`name` does not exist" when nothing is there; `ValueError` "`name` is not a regular file (it is a FIFO ...)"
    for anything else (a FIFO or device would block or never end when read)."""
    path = Path(not_blank(path, name))
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} does not exist") from None
    except OSError as err:
        raise ValueError(f"{name} cannot be read: {err.strerror or err}") from None
    if stat.S_ISREG(mode) or (directory and stat.S_ISDIR(mode)):
        return path
    expected = "a file or a directory" if directory else "a file"
    raise ValueError(f"{name} is not a regular file but {file_kind(mode)}: expected {expected}")


def read_text_file(path: str | os.PathLike, what: str, limit: SizeLimit = CONFIG) -> str:
    """The UTF-8 text of the file at `path`, which a message calls `what` ("run config"), of at most `limit`
    (`file_limits`: a config or settings file by default)."""
    path = regular_file(path, f"{what} {path}")
    data = read_limited(path, f"{what} {path}", limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{what} {path} is not UTF-8 text (byte {err.start}): expected a text file") from None


def read_yaml_file(path: str | os.PathLike, what: str, limit: SizeLimit = CONFIG) -> Any:
    """The YAML value of the file at `path` (None for an empty file)."""
    return parse_yaml(read_text_file(path, what, limit), f"{what} {path}")


def read_json_file(path: str | os.PathLike, what: str, limit: SizeLimit = CONFIG) -> Any:
    """The JSON value of the file at `path` (a UTF-8 byte-order mark is allowed, as SQuAD files carry one)."""
    return parse_json(read_text_file(path, what, limit).removeprefix("\ufeff"), f"{what} {path}")


def read_mapping_file(path: str | os.PathLike, what: str, limit: SizeLimit = CONFIG) -> dict:
    """A JSON (`.json`) or YAML (any other suffix) file that must hold a mapping."""
    read = read_json_file if Path(path).suffix == ".json" else read_yaml_file
    data = read(path, what, limit)
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path}: expected a mapping, got {type(data).__name__}")
    return data
