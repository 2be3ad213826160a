"""The token stream of a corpus: each document's ids, then the end-of-document (EOD) id.

    ids = document_ids(documents(paths), tokenizer)   # (N,) int64: doc 1, EOD, doc 2, EOD, ...
    docs = split_documents(ids, tokenizer.eod_id)      # back into documents, for packing them whole

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


def split_documents(ids: Tensor, eod_id: int) -> list[Tensor]:
    """A token stream (N,) -> its documents, each ending with its EOD id (the last may lack one, where a split of
    the stream cut it)."""
    ends = (ids == eod_id).nonzero().flatten() + 1
    bounds = [0, *ends.tolist()]
    if bounds[-1] < len(ids):
        bounds.append(len(ids))
    return [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
