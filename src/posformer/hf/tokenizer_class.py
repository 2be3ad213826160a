"""A tokenizer folder whose tokenizer_config.json names a class the installed transformers does not have.

    name = unknown_class(directory)      # "TokenizersBackend" under transformers 4.x; None when the class is known
    tokenizer = read_fast(directory)     # its tokenizer.json as a PreTrainedTokenizerFast

transformers 5.x saves a tokenizer read from a tokenizer.json as `"tokenizer_class": "TokenizersBackend"`, which 4.x
does not have, so 4.x's AutoTokenizer refuses the folder (posformer writes `PreTrainedTokenizerFast` instead,
`utils.tokenizer_config`, but folders written by transformers itself, or by earlier posformer runs, keep it). The
tokenizer.json holds the whole tokenizer (vocabulary, merges, pre-tokenizer, special tokens), and 4.x's
`PreTrainedTokenizerFast` reads it with the settings of tokenizer_config.json (eos_token, ...): the same ids.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from posformer.checkpoints.model_dir import read_json
from posformer.hf.tokenizer_files import TOKENIZER_CONFIG, TOKENIZER_JSON

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

BASE_LOGGER = "transformers.tokenization_utils_base"
CLASS_MISMATCH = "The tokenizer class you load from this checkpoint is not the same type"


def _known(name: str) -> bool:
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    return any(tokenizer_class_from_name(candidate) is not None for candidate in (name, f"{name}Fast"))


def unknown_class(directory: Path) -> str | None:
    """The class `directory`'s tokenizer_config.json names when the installed transformers has no such class and a
    tokenizer.json is there to read instead; None otherwise (AutoTokenizer reads the folder, or says why not)."""
    if not (directory / TOKENIZER_CONFIG).is_file() or not (directory / TOKENIZER_JSON).is_file():
        return None
    try:
        name = read_json(directory, TOKENIZER_CONFIG).get("tokenizer_class")
    except (OSError, ValueError):
        return None
    return name if isinstance(name, str) and name and not _known(name) else None


class _DropClassMismatch(logging.Filter):
    """Drops transformers' warning that the folder names another class: `read_fast` reads it so on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(CLASS_MISMATCH)


def read_fast(directory: Path, **overrides: str) -> PreTrainedTokenizerFast:
    """`directory`'s tokenizer.json and tokenizer_config.json settings as a `transformers.PreTrainedTokenizerFast`;
    `overrides`: keyword arguments for `from_pretrained` (`tokenizer_files.check_tokenizer_dir`'s file paths)."""
    from transformers import PreTrainedTokenizerFast

    logger, quiet = logging.getLogger(BASE_LOGGER), _DropClassMismatch()
    logger.addFilter(quiet)
    try:
        return PreTrainedTokenizerFast.from_pretrained(str(directory), **overrides)
    finally:
        logger.removeFilter(quiet)
