"""Synthetic length-generalisation tasks: copy, reverse, sort, addition and parity (after Kazemnejad et al. 2023,
"The Impact of Positional Encoding on Length Generalization in Transformers"), and passkey retrieval
(Mohtashami & Jaggi 2023).

Every task shares one small vocabulary (`VOCAB`) and writes an example as

    prompt  SEP  target  EOS

where the model is trained on the target and EOS only. The `length` of an example is the task's size n:
the number of symbols to copy, reverse or sort, of digits in each addend, of bits, or of prompt tokens around
the passkey. Examples come from a `random.Random`, so a seed fixes them all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

SPECIALS = ["<pad>", "=", "<eos>"]
DIGITS = [str(d) for d in range(10)]
MARKERS = ["+", "<key>", "<query>"]
FILLER = ["the", "grass", "is", "green", "."]  # the passkey paper's filler, one token a word, repeated
VOCAB = SPECIALS + DIGITS + MARKERS + FILLER
TOKEN = {token: i for i, token in enumerate(VOCAB)}
PAD, SEP, EOS = TOKEN["<pad>"], TOKEN["="], TOKEN["<eos>"]
PLUS, KEY, QUERY = TOKEN["+"], TOKEN["<key>"], TOKEN["<query>"]
DIGIT = [TOKEN[d] for d in DIGITS]
PASSKEY_DIGITS = 5


@dataclass(frozen=True)
class Example:
    """prompt and target: token ids of `VOCAB`; length: the task size n it was drawn at."""

    prompt: tuple[int, ...]
    target: tuple[int, ...]
    length: int


def _digits(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(10) for _ in range(n)]


def copy(rng: random.Random, n: int) -> Example:
    """n random digits; the target repeats them."""
    symbols = [DIGIT[d] for d in _digits(rng, n)]
    return Example(tuple(symbols), tuple(symbols), n)


def reverse(rng: random.Random, n: int) -> Example:
    """n random digits; the target is them in reverse order."""
    symbols = [DIGIT[d] for d in _digits(rng, n)]
    return Example(tuple(symbols), tuple(reversed(symbols)), n)


def sort(rng: random.Random, n: int) -> Example:
    """n random digits (repeats allowed); the target is them in increasing order."""
    symbols = [DIGIT[d] for d in _digits(rng, n)]
    return Example(tuple(symbols), tuple(sorted(symbols)), n)


def parity(rng: random.Random, n: int) -> Example:
    """n random bits (the digits 0 and 1); the target is one bit: 1 when the number of ones is odd."""
    bits = [rng.randrange(2) for _ in range(n)]
    return Example(tuple(DIGIT[b] for b in bits), (DIGIT[sum(bits) % 2],), n)


def addition(rng: random.Random, n: int) -> Example:
    """a + b of two n-digit numbers, every number written least-significant digit first (the order in which
    the carries run); the target is the sum, n or n + 1 digits."""
    low = 0 if n == 1 else 10 ** (n - 1)
    a, b = rng.randrange(low, 10**n), rng.randrange(low, 10**n)

    def little_endian(value: int) -> list[int]:
        return [DIGIT[int(c)] for c in reversed(str(value))]

    return Example(tuple(little_endian(a) + [PLUS] + little_endian(b)), tuple(little_endian(a + b)), n)


def passkey(rng: random.Random, n: int, depth: float | None = None) -> Example:
    """n prompt tokens: filler, with `<key> d1..d5` at `depth` (a fraction of the filler before it; random when
    None), ending in `<query>`; the target is the 5 key digits. n >= 7."""
    if n < PASSKEY_DIGITS + 2:
        raise ValueError(f"passkey: length {n} is too short: the key and the query take {PASSKEY_DIGITS + 2} tokens")
    key = [DIGIT[d] for d in _digits(rng, PASSKEY_DIGITS)]
    filler_len = n - PASSKEY_DIGITS - 2
    where = round((rng.random() if depth is None else depth) * filler_len)
    filler = [TOKEN[FILLER[i % len(FILLER)]] for i in range(filler_len)]
    prompt = filler[:where] + [KEY] + key + filler[where:] + [QUERY]
    return Example(tuple(prompt), tuple(key), n)


TASKS: dict[str, Callable[[random.Random, int], Example]] = {
    "copy": copy,
    "reverse": reverse,
    "sort": sort,
    "addition": addition,
    "parity": parity,
    "passkey": passkey,
}
MIN_LENGTH = {"passkey": PASSKEY_DIGITS + 2}


def min_length(task: str) -> int:
    return MIN_LENGTH.get(task, 1)


def decode(ids: tuple[int, ...] | list[int]) -> str:
    """Token ids as text, for reading examples."""
    return " ".join(VOCAB[i] for i in ids)
