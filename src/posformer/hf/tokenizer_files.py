"""The files of a tokenizer directory, checked before `transformers` reads them.

`AutoTokenizer.from_pretrained` opens whatever it finds: files beside the model (a symlink may lead
anywhere), and file paths written in `tokenizer_config.json` (`"tokenizer_file": "/elsewhere"`). It
also turns a corrupt `tokenizer.json` into a confusing error about protobuf (it falls back to a slow
tokenizer). `check_tokenizer_dir` reads every such file through `model_dir.model_file` and checks
the JSON ones, so each of these cases is a `ValueError` naming the file.
"""

from __future__ import annotations

from pathlib import Path

from posformer.checkpoints.manifest import verify_if_present
from posformer.checkpoints.model_dir import model_file, read_json
from posformer.utils.file_limits import TOKENIZER, check_size

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
JSON_OBJECTS = (TOKENIZER_CONFIG, "special_tokens_map.json", "added_tokens.json", "vocab.json")
SUFFIXES = (".json", ".txt", ".model", ".spm", ".jinja", ".tiktoken", ".bpe", ".vocab")
TEMPLATES_DIR = "additional_chat_templates"
# the files that hold a vocabulary (one of them makes a tokenizer directory), and the suffixes of such files
VOCABULARY_FILES = (TOKENIZER_JSON, "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model", "source.spm")
VOCABULARY_SUFFIXES = (".model", ".spm", ".tiktoken")
NOT_OPENED = ("special_tokens_map_file", "name_or_path")  # informational keys transformers never opens
FILE_KEYS = ("vocab", "merges", "monolingual_vocab")  # keys naming a file without a `_file` suffix


def _readable_names(directory: Path) -> list[str]:
    """The entries of `directory` a tokenizer loader may open (by suffix), with the chat-template folder's."""
    names = [p.name for p in directory.iterdir() if p.name.endswith(SUFFIXES)]
    templates = directory / TEMPLATES_DIR
    if templates.is_dir() or templates.is_symlink():
        model_file(directory, TEMPLATES_DIR)
        names += [f"{TEMPLATES_DIR}/{p.name}" for p in templates.iterdir()]
    return sorted(names)


def _is_file_key(key: str) -> bool:
    return key not in NOT_OPENED and (key.endswith(("_file", "_spm")) or key in FILE_KEYS)


def _file_overrides(directory: Path, config: dict) -> dict[str, str]:
    """The file paths written in tokenizer_config.json, each replaced by the file of that name in `directory`
    (a stale absolute path from the machine that saved it included); one that is not there is refused."""
    overrides = {}
    for key, value in config.items():
        if not (_is_file_key(key) and isinstance(value, str)):
            continue
        name = value.replace("\\", "/").rsplit("/", 1)[-1]
        path = model_file(directory, name, source=directory / TOKENIZER_CONFIG) if name else None
        if path is None or not path.is_file():
            raise ValueError(
                f"{directory / TOKENIZER_CONFIG}: {key}={value!r} is invalid: expected the name of a "
                f"file inside {directory}"
            )
        overrides[key] = str(path)
    return overrides


def _check_tokenizer_json(path: Path) -> None:
    try:
        from tokenizers import Tokenizer
    except ImportError:  # transformers reports it
        return
    try:
        Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust library raises plain Exceptions
        raise ValueError(f"{path} is not a valid tokenizer file (truncated or corrupt?): {err}") from err


def has_vocabulary(directory: Path) -> bool:
    """Whether `directory` holds a file a tokenizer's vocabulary is read from (`VOCABULARY_FILES`)."""
    return any((directory / name).is_file() for name in VOCABULARY_FILES) or any(
        path.suffix in VOCABULARY_SUFFIXES for path in directory.iterdir() if path.is_file()
    )


def check_tokenizer_dir(directory: Path) -> dict[str, str]:
    """Check the tokenizer files of `directory` (see the module doc); returns the keyword arguments that pin
    the file paths of its tokenizer_config.json inside it, for `AutoTokenizer.from_pretrained`."""
    names = _readable_names(directory)
    for name in names:
        path = model_file(directory, name)
        if path.is_file():
            check_size(path, str(path), TOKENIZER)
    verify_if_present(directory, only=names)
    for name in JSON_OBJECTS:
        if name in names:
            read_json(directory, name)
    if TOKENIZER_JSON in names:
        _check_tokenizer_json(directory / TOKENIZER_JSON)
    config = read_json(directory, TOKENIZER_CONFIG) if TOKENIZER_CONFIG in names else {}
    return _file_overrides(directory, config)
