"""tokenizer_config.json in the form transformers 4.x and 5.x both read, whichever of them wrote it.

    text = portable_tokenizer_config(text, where)   # the file's text, in that form (`where`: the file, for errors)
    make_portable(folder)                           # the file of a folder posformer has just filled, rewritten so
    files = saved_tokenizer_files(tokenizer)        # {name: text} of what tokenizer.save_pretrained writes, so

transformers 5.x saves a tokenizer read from a tokenizer.json alone as `"tokenizer_class": "TokenizersBackend"`, a
class 4.x does not have: its `AutoTokenizer.from_pretrained` then fails ("Tokenizer class TokenizersBackend does
not exist"). 4.x names that tokenizer `PreTrainedTokenizerFast`, which 5.x maps back to `TokenizersBackend`
(`tokenizer_class_from_name` of 5.24.0), so that name is the one written. 5.x also records how the folder was
opened (`is_local`, `local_files_only`), which says nothing about the tokenizer and is set again by 5.x's own
loader on every read: those keys are left out. Every other key, and every other class name (`BertTokenizer`,
`GPT2Tokenizer`, ... which both versions read), is kept as it is. The file is read within the size limit of a
tokenizer file (`file_limits.TOKENIZER`), and one that is not a JSON object is a ValueError naming it, never passed
on as it is. The rewrite replaces the file in one rename (`safe_write.write_text_atomic`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from posformer.utils.file_limits import TOKENIZER
from posformer.utils.safe_write import write_text_atomic
from posformer.utils.user_files import parse_json, read_text_file

TOKENIZER_CONFIG = "tokenizer_config.json"
PORTABLE_CLASSES = {"TokenizersBackend": "PreTrainedTokenizerFast"}  # 5.x-only name -> the name both read
LOADING_STATE = ("is_local", "local_files_only")  # how 5.x opened the folder, not the tokenizer


def portable_config(config: dict) -> dict:
    """`config` (a tokenizer_config.json object) with a 5.x-only class renamed and the loading state dropped."""
    portable = {key: value for key, value in config.items() if key not in LOADING_STATE}
    name = portable.get("tokenizer_class")
    if isinstance(name, str) and name in PORTABLE_CLASSES:
        portable["tokenizer_class"] = PORTABLE_CLASSES[name]
    return portable


def portable_tokenizer_config(text: str, where: str = TOKENIZER_CONFIG) -> str:
    """The text of a tokenizer_config.json in the portable form (the text itself when it already is); a ValueError
    naming `where` (the file) when the text is not a JSON object."""
    config = parse_json(text, where)
    if not isinstance(config, dict):
        raise ValueError(f"{where} must hold a JSON object, got {type(config).__name__}")
    if portable_config(config) == config:
        return text
    return json.dumps(portable_config(config), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def make_portable(folder: str | Path) -> None:
    """Rewrite `folder`'s tokenizer_config.json in the portable form, where it has one, replacing the file in one
    rename; the file is read within a tokenizer file's size limit (checked before a byte is read), and a ValueError
    names it when it is not UTF-8 text of a JSON object. For a folder posformer has just created and filled (a
    staging folder, a `TemporaryDirectory`)."""
    path = Path(folder) / TOKENIZER_CONFIG
    if not path.is_file():
        return
    text = read_text_file(path, "tokenizer config", TOKENIZER)
    portable = portable_tokenizer_config(text, str(path))
    if portable != text:
        write_text_atomic(path, portable)


def saved_tokenizer_files(tokenizer: Any, suffix: str = "") -> dict[str, str]:
    """{name: UTF-8 text} of the files ending in `suffix` that `tokenizer.save_pretrained` writes (its
    tokenizer_config.json made portable), in name order, to store beside a model: each read within a tokenizer
    file's size limit (`file_limits.TOKENIZER`, checked before a byte is read); a ValueError names a file over it
    or not UTF-8 text."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        make_portable(tmp)
        return {
            path.name: read_text_file(path, "saved tokenizer file", TOKENIZER)
            for path in sorted(Path(tmp).iterdir())
            if path.name.endswith(suffix) and path.is_file()
        }
