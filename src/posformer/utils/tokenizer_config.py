"""tokenizer_config.json in the form transformers 4.x and 5.x both read, whichever of them wrote it.

    text = portable_tokenizer_config(text)   # the file's text, in that form
    make_portable(folder)                    # the file of a folder posformer has just filled, rewritten so

transformers 5.x saves a tokenizer read from a tokenizer.json alone as `"tokenizer_class": "TokenizersBackend"`, a
class 4.x does not have: its `AutoTokenizer.from_pretrained` then fails ("Tokenizer class TokenizersBackend does
not exist"). 4.x names that tokenizer `PreTrainedTokenizerFast`, which 5.x maps back to `TokenizersBackend`
(`tokenizer_class_from_name` of 5.24.0), so that name is the one written. 5.x also records how the folder was
opened (`is_local`, `local_files_only`), which says nothing about the tokenizer and is set again by 5.x's own
loader on every read: those keys are left out. Every other key, and every other class name (`BertTokenizer`,
`GPT2Tokenizer`, ... which both versions read), is kept as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

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


def portable_tokenizer_config(text: str) -> str:
    """The text of a tokenizer_config.json in the portable form; text that is not a JSON object comes back as it
    is (the reader names what is wrong with it)."""
    try:
        config = json.loads(text)
    except ValueError:
        return text
    if not isinstance(config, dict) or portable_config(config) == config:
        return text
    return json.dumps(portable_config(config), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def make_portable(folder: str | Path) -> None:
    """Rewrite `folder`'s tokenizer_config.json in the portable form, where it has one. Only for a folder posformer
    has just created and filled (a staging folder, a `TemporaryDirectory`): no link can be planted there."""
    path = Path(folder) / TOKENIZER_CONFIG
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    portable = portable_tokenizer_config(text)
    if portable != text:
        path.write_text(portable, encoding="utf-8")
