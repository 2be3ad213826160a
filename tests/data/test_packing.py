"""Packing whole documents into rows (`data.packing`) and the resumable batches of packed rows
(`train.batches.PackedBatches`): every piece lands whole exactly once, a row is opened only when no earlier row
had room (best-fit decreasing), the same documents give the same rows, and batches resume exactly."""

from __future__ import annotations

import random

import torch

from posformer.data.packing import PAD_DOCUMENT, pack_documents, pieces
from posformer.modules.heads import IGNORE_INDEX
from posformer.train.batches import PackedBatches

SEQ_LEN = 32


def _documents(count: int = 200, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, 50) for _ in range(rng.randint(0, 70))] for _ in range(count)]


def _row_documents(ids: torch.Tensor, doc_ids: torch.Tensor) -> list[list[int]]:
    """The documents of one row, in order, from its document ids."""
    found: dict[int, list[int]] = {}
    for token, doc in zip(ids.tolist(), doc_ids.tolist()):
        if doc != PAD_DOCUMENT:
            found.setdefault(doc, []).append(token)
    return list(found.values())


def test_every_piece_lands_whole_once_and_rows_open_only_when_nothing_fits() -> None:
    documents = _documents()
    rows = pack_documents(documents, SEQ_LEN)
    placed = [
        doc for r in range(len(rows.input_ids)) for doc in _row_documents(rows.input_ids[r], rows.document_ids[r])
    ]
    assert sorted(map(tuple, placed)) == sorted(map(tuple, pieces(documents, SEQ_LEN)))
    assert torch.equal(rows.keep, rows.document_ids != PAD_DOCUMENT)
    assert not rows.keep[:, 0].logical_not().any() and bool((rows.keep[:, 1:] <= rows.keep[:, :-1]).all())
    free = (~rows.keep).sum(-1)
    longest = [max(len(d) for d in _row_documents(rows.input_ids[r], rows.document_ids[r])) for r in range(len(free))]
    for later in range(len(free)):  # a row's longest piece opened it: no earlier row had room for it then
        assert all(int(free[earlier]) < longest[later] for earlier in range(later))
    assert pack_documents(documents, SEQ_LEN).input_ids.equal(rows.input_ids)


def test_packed_batches_mask_the_padding_and_resume_exactly() -> None:
    rows = pack_documents(_documents(), SEQ_LEN)
    batches = PackedBatches(rows, seed=3)
    first = [batches.next_batch(8) for _ in range(3)]
    state = batches.state_dict()
    following = [batches.next_batch(8) for _ in range(40)]  # past an epoch
    resumed = PackedBatches(rows, seed=3)
    resumed.load_state_dict(state)
    for expected in following:
        got = resumed.next_batch(8)
        assert all(torch.equal(got[k], expected[k]) for k in expected)
    batch = first[0]
    assert torch.equal(batch["labels"] == IGNORE_INDEX, batch["attention_mask"] == 0)
    assert torch.equal(batch["attention_mask"].bool(), batch["document_ids"] != PAD_DOCUMENT)
    shard = PackedBatches(rows, seed=3).next_batch(8, rank=1, world_size=2)
    assert torch.equal(shard["input_ids"], first[0]["input_ids"][4:])
