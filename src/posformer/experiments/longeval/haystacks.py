"""The text around the needles: noise (the passkey filler, repeated) or a run of book text, with the places a
needle may go: between two sentences of the noise, after a sentence end, a semicolon or a line end of a book (RULER
inserts its needles between sentences too), never inside a word.

Book text comes as a token stream: for evaluation the held-out books of `posformer extrapolate`
(`HELD_OUT_BOOKS`), for training the other Gutenberg books (or the training run's own token stream), so that the
two splits never share a haystack either (`book_ids`).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from posformer.experiments.longeval.draws import randint
from posformer.experiments.longeval.items import Encode, check_split
from posformer.experiments.passkey import FILLER

BOOK_SEPARATOR = "\n\n"
SKIP_FRACTION = 0.05  # the front matter of a book (title page, contents) is skipped
END_SEARCH = 256  # how far back a book window may move to end at a sentence end
SENTENCES = tuple(re.findall(r" [^.]*\.", FILLER))
ENDS = (".", "!", "?", ";", "\n", '."', '!"', '?"', ".\u201d", "!\u201d", "?\u201d")  # a needle may follow these


@dataclass(frozen=True)
class Haystack:
    """ids: the haystack's tokens; boundaries: the sorted indices where a piece may be inserted, 0 and len(ids)
    among them."""

    ids: list[int]
    boundaries: list[int]

    def nearest(self, where: float) -> int:
        """The boundary nearest to `where` (a token index), the lower of two as near."""
        i = bisect_left(self.boundaries, where)
        if i == len(self.boundaries):
            return self.boundaries[-1]
        if i > 0 and where - self.boundaries[i - 1] <= self.boundaries[i] - where:
            return self.boundaries[i - 1]
        return self.boundaries[i]


def noise(encode: Encode, room: int) -> Haystack:
    """The last `room` tokens of the filler " The grass is green. The sky is blue. ..." repeated: the text ends with
    a whole sentence (the first one may be cut at a token), a boundary before each sentence."""
    sentences = [encode(sentence) for sentence in SENTENCES]
    ids: list[int] = []
    starts = []
    while len(ids) < room:
        for sentence in sentences:
            starts.append(len(ids))
            ids += sentence
    cut = len(ids) - room
    return Haystack(ids[cut:], sorted({0, room} | {b - cut for b in starts if b >= cut}))


def book(haystack_ids: Tensor | None, room: int, rng: torch.Generator, task: str, encode: Encode) -> Haystack:
    """`room` consecutive tokens of haystack_ids (N,) ending at a random place, moved back to just after the last
    token of `ENDS` (those one token long under `encode`) within END_SEARCH tokens, so that the question follows a
    sentence end; a boundary after each such token."""
    if haystack_ids is None:
        raise ValueError(f"longeval: task {task!r} hides its needles in book text: give haystack_ids (book tokens)")
    if haystack_ids.numel() < room:
        raise ValueError(
            f"longeval: task {task!r} needs {room} tokens of book text and the haystack holds "
            f"{haystack_ids.numel()}: give a longer text"
        )
    ends = {found[0] for found in map(encode, ENDS) if len(found) == 1}
    end = randint(rng, haystack_ids.numel() - room + 1) + room
    before = haystack_ids[max(room, end - END_SEARCH) : end].tolist()  # the window ends at a sentence end if it can
    end -= next((k for k, token in enumerate(reversed(before)) if token in ends), 0)
    ids = haystack_ids[end - room : end].tolist()
    return Haystack(ids, sorted({0, room} | {i + 1 for i, token in enumerate(ids) if token in ends and i < room}))


def book_files(split: str, data_dir: str | Path | None = None) -> list[Path]:
    """The Gutenberg books of `split`: "eval" the held-out books of `posformer extrapolate`, "train" the others."""
    from posformer.data.shared import default_data_dir, fetch_hint
    from posformer.experiments.corpus import HELD_OUT_BOOKS

    check_split(split)
    root = Path(data_dir if data_dir is not None else default_data_dir())
    folder = root / "gutenberg"
    if not folder.is_dir():
        raise FileNotFoundError(
            f"longeval: the book haystacks read {folder}, which does not exist: {fetch_hint('gutenberg', root)}; "
            "or give --data-dir (the folder holding gutenberg/), or tasks without book text (single_noise, vt, cwe, "
            "fwe)"
        )
    held_out = [folder / name for name in HELD_OUT_BOOKS]
    missing = [p.name for p in held_out if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"longeval: the held-out book(s) {missing} are not in {folder}: {fetch_hint('gutenberg', root)}"
        )
    if split == "eval":
        return held_out
    return [p for p in sorted(folder.glob("*.txt")) if p.name not in HELD_OUT_BOOKS]


def book_ids(encode: Encode, split: str, data_dir: str | Path | None = None, max_chars: int = 400_000) -> Tensor:
    """(N,) the token stream of `split`'s books, each book's text between its Gutenberg markers (`text_ids`)."""
    from posformer.experiments.corpus import read_document, strip_gutenberg

    return text_ids(
        encode, [strip_gutenberg(read_document(path), path.name) for path in book_files(split, data_dir)], max_chars
    )


def text_ids(encode: Encode, texts: list[str], max_chars: int = 400_000) -> Tensor:
    """(N,) a haystack stream of `texts` (books): each from the paragraph break after its 5% mark (past the front
    matter), at most `max_chars` characters of it, the texts joined by a blank line."""
    kept = []
    for text in texts:
        start = text.find(BOOK_SEPARATOR, int(len(text) * SKIP_FRACTION))
        kept.append(text[max(start, 0) :][:max_chars].strip())
    return torch.tensor(encode(BOOK_SEPARATOR.join(kept)), dtype=torch.long)
