"""Reading UTF-8 text files, and the sample corpus that ships with the package: what the run settings and the
document readers need, without torch (the tokenizers and token streams are `data.text`)."""

from __future__ import annotations

from pathlib import Path

from posformer.utils.file_limits import DATA, read_limited
from posformer.utils.user_files import regular_file

SAMPLES = Path(__file__).resolve().parent / "samples"


def default_corpus() -> Path:
    """The Tiny Shakespeare sample that ships with the package (see samples/SOURCE.md)."""
    return SAMPLES / "tinyshakespeare.txt"


def read_utf8(path: str | Path, name: str) -> str:
    """Read a UTF-8 text file of at most `file_limits.DATA` (a byte-order mark is dropped); errors begin with
    `name` ("text corpus x.txt")."""
    path = regular_file(path, name)
    try:
        return read_limited(path, name, DATA).decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} is not valid UTF-8: {err}") from None


def read_text(path: str | Path) -> str:
    """Read a UTF-8 text corpus (a byte-order mark is dropped) of at least two characters. Errors name the file."""
    text = read_utf8(path, f"text corpus {path}")
    if len(text) < 2:
        raise ValueError(f"text corpus {path} is empty or has a single character; nothing to learn from")
    return text
