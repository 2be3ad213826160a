"""Plain-text corpora for causal language modelling, with posformer's own tokenizers: one id per character
(`CharTokenizer`) or per UTF-8 byte (`ByteTokenizer`), and one more id, `eod_id`, for the end-of-document token
`<|endoftext|>` that the training stream puts after each document (`encode` never gives it). Both save Hugging Face
tokenizer files that `transformers.AutoTokenizer` reads with the same ids (`posformer.hf.char_byte_tokenizers`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor

from posformer.checkpoints.model_dir import model_file
from posformer.data.text_files import SAMPLES, default_corpus, read_text, read_utf8
from posformer.hf.char_byte_tokenizers import (
    EOD_TOKEN,
    byte_tokenizer,
    char_tokenizer,
    parse_chars,
    tokenizer_files,
)
from posformer.hf.tokenizer_files import TOKENIZER_JSON
from posformer.utils.file_limits import TOKENIZER, not_blank
from posformer.utils.safe_write import make_dirs, write_text_atomic
from posformer.utils.user_files import read_json_file

# the text files' readers live in `data.text_files` (no torch) and are imported from here too
__all__ = ["ByteTokenizer", "CharTokenizer", "SAMPLES", "TokenStream", "default_corpus", "read_text", "read_utf8"]


class CharTokenizer:
    """One id per distinct character of the training text, in sorted order; with `eod`, then the EOD id.

    `eod=False` is the vocabulary of runs trained before posformer had an end-of-document token.
    """

    def __init__(self, chars: list[str], eod: bool = True) -> None:
        self.chars = list(chars)
        self.index = {c: i for i, c in enumerate(self.chars)}
        self.eod_id = len(self.chars) if eod else None

    @classmethod
    def from_documents(cls, documents: Iterable[str]) -> "CharTokenizer":
        """The sorted characters of every document, read one at a time."""
        chars: set[str] = set()
        for text in documents:
            chars.update(text)
        return cls(sorted(chars))

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls.from_documents([text])

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + (self.eod_id is not None)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"characters {unknown[:10]} are not in the tokenizer's vocabulary")
        return [self.index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`; the EOD id reads as `<|endoftext|>` (as AutoTokenizer's `decode` has it)."""
        return "".join(EOD_TOKEN if i == self.eod_id else self.chars[i] for i in ids)

    def files(self) -> dict[str, str]:
        """{file name: text}: Hugging Face's tokenizer.json and tokenizer_config.json for this vocabulary."""
        eod = self.eod_id is not None
        return tokenizer_files(char_tokenizer(self.chars, eod=eod), eos_token=EOD_TOKEN if eod else None)

    def save_pretrained(self, directory: str | Path) -> None:
        """Write `files()` into `directory` (created if missing)."""
        _write(directory, self.files())

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        """From a tokenizer.json (or the directory holding one) that `save_pretrained` wrote, or the `{"type": "char",
        "chars": [...]}` file of runs trained before; errors name the file."""
        if Path(not_blank(path, "tokenizer file")).is_dir():
            path = model_file(path, TOKENIZER_JSON)
        data = read_json_file(path, "tokenizer file", TOKENIZER)
        found = parse_chars(data, path) if isinstance(data, dict) else None
        if found is None:
            raise ValueError(
                f"{path} is not a posformer character tokenizer file: expected the tokenizer.json that "
                'CharTokenizer.save_pretrained writes, or {"type": "char", "chars": [distinct single characters]}'
            )
        return cls(found.chars, eod=found.eod)


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, and 256 for the end of a document; decoding replaces invalid UTF-8 with U+FFFD."""

    vocab_size = 257
    eod_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`; the EOD id reads as `<|endoftext|>` (as AutoTokenizer's `decode` has it)."""
        pieces, run = [], bytearray()
        for i in ids:
            if i == self.eod_id:
                pieces += [run.decode("utf-8", errors="replace"), EOD_TOKEN]
                run = bytearray()
            else:
                run.append(i)
        return "".join(pieces) + run.decode("utf-8", errors="replace")

    def files(self) -> dict[str, str]:
        """{file name: text}: Hugging Face's byte-level tokenizer.json (token id b is byte b, 256 the EOD token)
        and its config."""
        return tokenizer_files(byte_tokenizer(eod=True), eos_token=EOD_TOKEN)

    def save_pretrained(self, directory: str | Path) -> None:
        """Write `files()` into `directory` (created if missing)."""
        _write(directory, self.files())


def _write(directory: str | Path, files: dict[str, str]) -> None:
    directory = make_dirs(directory)
    for name, text in files.items():
        write_text_atomic(directory / name, text)


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
