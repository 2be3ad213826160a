"""Bytes as the tokenizer of the long-context suite's tests: one token a byte, so a prompt's text and its token
positions are one and the same, and the tests read prompts as text."""

from __future__ import annotations

import torch

from posformer.data.text import default_corpus


def encode(text: str) -> list[int]:
    return list(text.encode())


def decode(ids) -> str:
    return bytes(ids.tolist() if hasattr(ids, "tolist") else ids).decode()


def book_bytes(chars: int = 60_000) -> torch.Tensor:
    """(N,) the shipped Tiny Shakespeare sample as bytes: a book haystack."""
    return torch.tensor(encode(default_corpus().read_text(encoding="utf-8")[:chars]), dtype=torch.long)
