"""The token stream of a corpus: each document's ids, then the end-of-document (EOD) id.

    ids = document_ids(documents(paths), tokenizer)   # (N,) int64: doc 1, EOD, doc 2, EOD, ...

Documents are encoded one at a time into a compact buffer (8 bytes a token), so the corpus is never one Python
string nor one Python list.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Protocol

import torch
from torch import Tensor


class DocumentTokenizer(Protocol):
    eod_id: int

    def encode(self, text: str) -> list[int]: ...


def document_ids(documents: Iterable[str], tokenizer: DocumentTokenizer) -> Tensor:
    """(N,) int64: the ids of every document, each followed by `tokenizer.eod_id`."""
    ids = array("q")
    for text in documents:
        ids.extend(tokenizer.encode(text))
        ids.append(tokenizer.eod_id)
    if not ids:
        return torch.zeros(0, dtype=torch.long)
    return torch.frombuffer(ids, dtype=torch.long).clone()
