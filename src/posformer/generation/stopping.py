"""How a row ends: at an end-of-sequence id, or once its text ends in a stop string; and what fills it afterwards.

`StopStrings` follows Hugging Face's StopStringCriteria (transformers 4.57.6): a row stops when one of the strings
occurs in the text of its last tokens and ends inside the last token (so a string that only appears earlier never
stops it, and one split over several tokens does). A token's text is what the tokenizer writes for it after other text
(`token_text`), so a leading space a tokenizer marks ("Ġ", "▁") counts; an id the tokenizer does not know (a model's
vocabulary may be larger) has no text, and no string is matched across it. Transformers 5.x matches the bytes of
byte-level tokenizers instead of their characters: the two agree on text without multi-byte characters.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import torch
from torch import Tensor

from posformer.config import Config
from posformer.utils.validation import check_token_in_vocabulary, fail, is_int

EosIds = Union[int, Sequence[int], None]
TEXT_BEFORE = "abcdef"  # text before a token, so that the tokenizer writes the token as it does inside a text


def eos_ids(eos_token_id: EosIds, vocab_size: int) -> list[int]:
    """The end-of-sequence ids a row can generate, as a list (empty: never stop early).

    Ids >= vocab_size are accepted, as Hugging Face accepts them, and dropped: no row can emit them.
    """
    eos = eos_token_id
    ids = [] if eos is None else [eos] if not isinstance(eos, (list, tuple)) else list(eos)
    if not all(is_int(i) and i >= 0 for i in ids):
        raise ValueError(f"eos_token_id must be token ids (integers >= 0), got {eos_token_id!r}")
    return [i for i in ids if i < vocab_size]


def pad_id(pad_token_id: int | None, cfg: Config, eos: list[int], eos_set: bool, can_end: bool) -> int | None:
    """What fills a row after its end: `pad_token_id`, else `Config.pad_token_id`, else the first eos id (of those
    in the vocabulary, `eos`); None (nothing fills it) when no eos ids are set at all (not `eos_set`, not even an
    empty list), as in Hugging Face.

    `can_end`: a row can end (at an eos id or a stop string); the pad is then checked to be a token id in the
    vocabulary.
    """
    if not eos_set:
        return None
    if pad_token_id is None and cfg.pad_token_id is None:
        return eos[0] if eos else None
    name, pad = (
        ("pad_token_id", pad_token_id) if pad_token_id is not None else ("Config.pad_token_id", cfg.pad_token_id)
    )
    if can_end:
        check_token_in_vocabulary(
            name, pad, cfg.vocab_size, "it fills the rows that ended at an eos id or a stop string"
        )
    return pad


def _writes_tokens(tokenizer: Any) -> bool:
    """A Hugging Face tokenizer: it writes token strings (convert_tokens_to_string) and encodes without specials."""
    return all(
        callable(getattr(tokenizer, name, None)) for name in ("convert_ids_to_tokens", "convert_tokens_to_string")
    )


class StopStrings:
    """Which rows end in one of `stop_strings` (a string or a list of them), read with `tokenizer`: a Hugging Face
    tokenizer, or any object with decode(list_of_ids) -> str (posformer's byte and character tokenizers)."""

    def __init__(self, stop_strings: str | Sequence[str], tokenizer: Any, name: str = "stop_strings") -> None:
        strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings
        if not isinstance(strings, (list, tuple)) or not strings or not all(isinstance(s, str) and s for s in strings):
            fail(name, stop_strings, "a non-empty string or a non-empty list of non-empty strings")
        if tokenizer is None:
            raise ValueError(
                f"{name} needs the model's tokenizer to read the generated tokens: generate(..., tokenizer=tok)"
            )
        if not _writes_tokens(tokenizer) and not callable(getattr(tokenizer, "decode", None)):
            fail("tokenizer", type(tokenizer).__name__, "a transformers tokenizer or an object with decode(ids)")
        self.strings = list(strings)
        self.window = max(len(s) for s in self.strings)  # every token writes a character or more: enough tokens
        self.tokenizer = tokenizer
        self.texts: dict[int, str | None] = {}
        self.before: list[str] | None = None

    def token_text(self, token: int) -> str | None:
        """The text `token` adds after other text; None for an id the tokenizer does not know."""
        if token not in self.texts:
            self.texts[token] = self._text(token)
        return self.texts[token]

    def _text(self, token: int) -> str | None:
        tokenizer = self.tokenizer
        if not _writes_tokens(tokenizer):
            return tokenizer.decode([token])
        if self.before is None:
            self.before = tokenizer.convert_ids_to_tokens(tokenizer.encode(TEXT_BEFORE, add_special_tokens=False))
        piece = tokenizer.convert_ids_to_tokens(token)
        if piece is None:
            return None
        text = tokenizer.convert_tokens_to_string([*self.before, piece])
        return text[text.index(TEXT_BEFORE) + len(TEXT_BEFORE) :]

    def __call__(self, sequences: Tensor) -> Tensor:
        """sequences (N, L) -> (N,) bool: the row's last `window` tokens write a text in which a stop string ends
        after the start of the last token's text."""
        hits = []
        for row in sequences[:, -self.window :].tolist():
            pieces = [self.token_text(token) for token in row]
            if None in pieces:  # an unknown id: only the tokens after it count, and none if it is the last
                pieces = pieces[len(pieces) - pieces[::-1].index(None) :] or [""]
            text = "".join(pieces)
            last_starts = len(text) - len(pieces[-1])
            hits.append(any(text.find(s, max(0, last_starts + 1 - len(s))) >= 0 for s in self.strings))
        return torch.tensor(hits, dtype=torch.bool, device=sequences.device)
