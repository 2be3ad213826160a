"""Deterministic, resumable, shardable batches for causal-LM training: windows of one token stream
(`WindowBatches`), or rows of whole packed documents (`PackedBatches`).

Epoch e cuts the token stream into windows of seq_len tokens starting at a random
offset in [0, seq_len), then visits them in a random order; both come from a
generator seeded with (seed, e), so the whole sequence of batches is a function of
the seed alone, and the position (epoch, index) is all a checkpoint needs to
continue it exactly. Under torchrun each optimizer step draws one global batch
and process r takes rows [r * b, (r + 1) * b): the distributed sampler.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.data.packing import PackedRows
from posformer.modules.heads import IGNORE_INDEX


class WindowBatches:
    """ids: (N,) tokens -> batches {"input_ids": (b, seq_len), "labels": (b, seq_len)}."""

    def __init__(self, ids: Tensor, seq_len: int, seed: int) -> None:
        if ids.numel() < 2 * seq_len:
            raise ValueError(
                f"the training text has {ids.numel()} tokens: too few for windows of "
                f"data.seq_len={seq_len} (need at least {2 * seq_len})"
            )
        self.ids, self.seq_len, self.seed = ids, seq_len, seed
        self.epoch, self.index = 0, 0
        self._order: tuple[int, Tensor, int] | None = None

    def _epoch_plan(self) -> tuple[Tensor, int]:
        """(window order, start offset) of the current epoch."""
        if self._order is None or self._order[0] != self.epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            offset = int(torch.randint(0, self.seq_len, (1,), generator=g))
            count = (self.ids.numel() - offset) // self.seq_len
            self._order = (self.epoch, torch.randperm(count, generator=g), offset)
        return self._order[1], self._order[2]

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        """The next global batch of `global_size` windows; this process's share of it."""
        rows = []
        while len(rows) < global_size:
            order, offset = self._epoch_plan()
            if self.index >= len(order):
                self.epoch, self.index = self.epoch + 1, 0
                continue
            start = offset + int(order[self.index]) * self.seq_len
            rows.append(self.ids[start : start + self.seq_len])
            self.index += 1
        share = global_size // world_size
        batch = torch.stack(rows[rank * share : (rank + 1) * share])
        return {"input_ids": batch, "labels": batch}

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed:
            raise ValueError(
                f"the checkpoint's data order has seed {state['seed']}, this run {self.seed}: "
                "resume with the same trainer.seed"
            )
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


class PackedBatches:
    """Rows of packed documents (`data.packing.PackedRows`) -> batches {"input_ids", "labels", "document_ids",
    "attention_mask"}, each (b, seq_len); labels are the input ids with the padding ignored (-100; the model
    ignores each document's first label itself). Epoch e visits the rows in an order seeded with (seed, e);
    (epoch, index) is all a checkpoint needs to continue exactly, as with `WindowBatches`."""

    def __init__(self, rows: PackedRows, seed: int) -> None:
        if not len(rows.input_ids):
            raise ValueError("no documents to pack: the training data holds no tokens")
        self.rows, self.seed = rows, seed
        self.epoch, self.index = 0, 0
        self._order: tuple[int, Tensor] | None = None

    def _epoch_order(self) -> Tensor:
        if self._order is None or self._order[0] != self.epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._order = (self.epoch, torch.randperm(len(self.rows.input_ids), generator=g))
        return self._order[1]

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        """The next global batch of `global_size` rows; this process's share of it."""
        picked = []
        while len(picked) < global_size:
            order = self._epoch_order()
            if self.index >= len(order):
                self.epoch, self.index = self.epoch + 1, 0
                continue
            picked.append(int(order[self.index]))
            self.index += 1
        share = global_size // world_size
        return packed_batch(self.rows, torch.tensor(picked[rank * share : (rank + 1) * share]))

    state_dict = WindowBatches.state_dict
    load_state_dict = WindowBatches.load_state_dict


def packed_batch(rows: PackedRows, picked: Tensor) -> dict[str, Tensor]:
    """The batch of the packed rows `picked` (indices): input_ids, labels (the padding ignored), document_ids and
    attention_mask, each (len(picked), seq_len)."""
    ids, keep = rows.input_ids[picked], rows.keep[picked]
    return {
        "input_ids": ids,
        "labels": ids.masked_fill(~keep, IGNORE_INDEX),
        "document_ids": rows.document_ids[picked],
        "attention_mask": keep.long(),
    }
