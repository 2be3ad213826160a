"""Packing whole documents into rows of one length, for training with `document_ids` (`Transformer.forward`).

Each row holds whole documents (a document longer than a row is cut into row-length pieces, each then a document
of its own), so that with `document_ids` every document attends within itself and its positions restart at 0,
as HF's padding-free training and torchtitan's document masking do. Rows are filled best-fit decreasing: the
pieces, longest first, each go to the fullest row that still has room for it, so that the padding left at the
rows' ends is small (a fraction of a percent once the documents are many and shorter than a row).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

PAD_DOCUMENT = -1  # the document id of the padding at a row's end


@dataclass(frozen=True)
class PackedRows:
    """input_ids, document_ids: (N, T) long (pads: token `pad_id`, document PAD_DOCUMENT); keep: (N, T) bool."""

    input_ids: Tensor
    document_ids: Tensor
    keep: Tensor

    @property
    def padding_share(self) -> float:
        """The share of the rows' slots that are padding."""
        return 1.0 - float(self.keep.float().mean()) if self.keep.numel() else 0.0


def pieces(documents: Iterable[Sequence[int]], seq_len: int) -> list[Sequence[int]]:
    """Each document, cut into pieces of at most seq_len tokens; empty documents dropped."""
    return [doc[start : start + seq_len] for doc in documents for start in range(0, len(doc), seq_len)]


def pack_documents(documents: Iterable[Sequence[int]], seq_len: int, pad_id: int = 0) -> PackedRows:
    """Pack `documents` (token id lists, in a fixed order) into rows of `seq_len` (best-fit decreasing; see the
    module docstring). Deterministic: the same documents give the same rows."""
    if seq_len < 1:
        raise ValueError(f"seq_len={seq_len} is invalid: expected an integer >= 1")
    cut = pieces(documents, seq_len)
    order = sorted(range(len(cut)), key=lambda i: (-len(cut[i]), i))
    rows: list[list[int]] = []
    room: list[tuple[int, int]] = []  # (free slots, row), ascending: the fullest row that fits comes first
    for i in order:
        need = len(cut[i])
        at = bisect.bisect_left(room, (need, -1))
        if at == len(room):
            rows.append([i])
            bisect.insort(room, (seq_len - need, len(rows) - 1))
            continue
        free, row = room.pop(at)
        rows[row].append(i)
        if free - need:
            bisect.insort(room, (free - need, row))
    ids = torch.full((len(rows), seq_len), pad_id, dtype=torch.long)
    doc_ids = torch.full_like(ids, PAD_DOCUMENT)
    for r, members in enumerate(rows):
        start = 0
        for d, i in enumerate(sorted(members)):
            piece = torch.as_tensor(cut[i], dtype=torch.long)
            ids[r, start : start + len(piece)], doc_ids[r, start : start + len(piece)] = piece, d
            start += len(piece)
    return PackedRows(ids, doc_ids, doc_ids != PAD_DOCUMENT)
