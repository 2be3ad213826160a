"""Deterministic, resumable, shardable batches of precomputed feature rows (QA windows, spans, ...).

The features are a dict of tensors with the same first dimension N (one row per
window). Epoch e visits the rows in the order torch.randperm(N) drawn from a generator
seeded with (seed, e), so the whole sequence of batches is a function of the seed, and
(epoch, index) is all a checkpoint needs to continue it exactly. A global batch may span
an epoch boundary. Under torchrun each optimizer step draws one global batch and process
r takes rows [r * b, (r + 1) * b), as `posformer.train.batches.WindowBatches` does.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import Tensor


class FeatureBatches:
    """features {name: (N, ...)} -> batches {name: (b, ...)}, the same rows of every tensor."""

    def __init__(self, features: Mapping[str, Tensor], seed: int) -> None:
        if not features:
            raise ValueError("FeatureBatches needs at least one feature tensor")
        sizes = {name: int(t.shape[0]) for name, t in features.items()}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"feature tensors must have the same number of rows, got {sizes}")
        self.rows = next(iter(sizes.values()))
        if self.rows == 0:
            raise ValueError("FeatureBatches got no feature rows: nothing to train on")
        self.features, self.seed = dict(features), seed
        self.epoch, self.index = 0, 0
        self._order: tuple[int, Tensor] | None = None

    def __len__(self) -> int:
        """The number of rows N."""
        return self.rows

    def epoch_order(self, epoch: int) -> Tensor:
        """The row order (N,) of epoch `epoch`: a permutation drawn from (seed, epoch)."""
        if self._order is None or self._order[0] != epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._order = (epoch, torch.randperm(self.rows, generator=g))
        return self._order[1]

    def next_indices(self, count: int) -> Tensor:
        """The next `count` row indices (count,), continuing into later epochs as needed."""
        taken = []
        while count > 0:
            order = self.epoch_order(self.epoch)
            part = order[self.index : self.index + count]
            taken.append(part)
            count -= len(part)
            self.index += len(part)
            if self.index >= self.rows:
                self.epoch, self.index = self.epoch + 1, 0
        return torch.cat(taken) if taken else torch.zeros(0, dtype=torch.long)

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        """The next global batch of `global_size` rows; this process's share, global_size // world_size rows."""
        if global_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad batch request: global_size={global_size}, rank={rank}, world_size={world_size}")
        rows = self.next_indices(global_size)
        share = global_size // world_size
        mine = rows[rank * share : (rank + 1) * share]
        return {name: tensor[mine] for name, tensor in self.features.items()}

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed, "rows": self.rows}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed:
            raise ValueError(f"the checkpoint's data order has seed {state['seed']}, this run {self.seed}: "
                             "resume with the same trainer.seed")
        if state.get("rows", self.rows) != self.rows:
            raise ValueError(f"the checkpoint was trained on {state['rows']} feature rows, this run has "
                             f"{self.rows}: resume with the same data and windowing settings")
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
