"""Plain-text corpora for causal language modelling, with a character-level tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

SAMPLES = Path(__file__).resolve().parent / "samples"


def default_corpus() -> Path:
    """The Tiny Shakespeare sample that ships with the package (see samples/SOURCE.md)."""
    return SAMPLES / "tinyshakespeare.txt"


def read_utf8(path: str | Path, name: str) -> str:
    """Read a UTF-8 text file (a byte-order mark is dropped); errors begin with `name` ("text corpus x.txt")."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{name} does not exist")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} is not valid UTF-8: {err}") from None


def read_text(path: str | Path) -> str:
    """Read a UTF-8 text corpus (a byte-order mark is dropped) of at least two characters. Errors name the file."""
    text = read_utf8(path, f"text corpus {path}")
    if len(text) < 2:
        raise ValueError(f"text corpus {path} is empty or has a single character; nothing to learn from")
    return text


class CharTokenizer:
    """One id per distinct character of the training text, in sorted order."""

    def __init__(self, chars: list[str]) -> None:
        self.chars = list(chars)
        self.index = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"characters {unknown[:10]} are not in the tokenizer's vocabulary")
        return [self.index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"type": "char", "chars": self.chars}, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        from posformer.utils.user_files import read_json_file

        data = read_json_file(path, "tokenizer file")
        chars = data.get("chars") if isinstance(data, dict) else None
        if (
            not isinstance(chars, list)
            or data.get("type") != "char"
            or not all(isinstance(c, str) and len(c) == 1 for c in chars)
            or len(set(chars)) != len(chars)
        ):
            raise ValueError(
                f'{path} is not a posformer character tokenizer file: expected {{"type": "char", '
                '"chars": [distinct single characters]}'
            )
        return cls(chars)


class TokenStream:
    """A long token sequence cut into random (input, target) windows.

    `batch(n, length, generator)` returns ids (n, length) and labels (n, length)
    equal to the ids (the causal-LM loss shifts them).
    """

    def __init__(self, ids: list[int] | Tensor) -> None:
        self.ids = torch.as_tensor(ids, dtype=torch.long)

    def __len__(self) -> int:
        return self.ids.numel()

    def batch(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        if len(self) <= length:
            raise ValueError(f"the text has {len(self)} tokens, too few for windows of {length}")
        starts = torch.randint(0, len(self) - length, (n,), generator=generator)
        return torch.stack([self.ids[s : s + length] for s in starts.tolist()])

    def windows(self, length: int) -> Tensor:
        """Every non-overlapping window of `length` tokens: (N, length)."""
        usable = (len(self) // length) * length
        return self.ids[:usable].view(-1, length)
