"""Deterministic, resumable, shardable batches of precomputed feature rows (QA windows, spans, ...).

The features are a dict of tensors with the same first dimension N (one row per
window). Epoch e visits the rows in an order drawn from a generator seeded with
(seed, e), so the whole sequence of batches is a function of the seed, and
(epoch, index) is all a checkpoint needs to continue it exactly. A global batch may span
an epoch boundary. Under torchrun each optimizer step draws one global batch and process
r takes rows [r * b, (r + 1) * b), as `posformer.train.batches.WindowBatches` does.

Two options make every CPU second count when rows are padded to a common width:

- `trim` (default on): each batch is cut to its longest row. The tensors as wide as
  `attention_mask` (input_ids, token_type_ids, ...) keep its longest row's width, and
  `labels` (N, L) keep up to the last column holding a label (not -100). Positions
  (start/end labels) always lie inside a row, so the cut changes no label; what it removes
  is padding, which a padded span loss would also have scored (run_qa.py pads to the full
  width).
- `group_size` (default off): the rows of an epoch's permutation are taken in groups of
  `group_size` and each group is sorted by row length, longest first (Hugging Face's
  `LengthGroupedSampler`, whose groups are 50 batches). Consecutive batches then hold rows
  of similar length and a trimmed batch carries little padding, while the groups keep the
  epoch's order random.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import Tensor

from posformer.utils.validation import check_int

IGNORE_INDEX = -100


def row_lengths(features: Mapping[str, Tensor]) -> Tensor | None:
    """The real length of every row (N,): its attention_mask ones, or None without an attention_mask."""
    mask = features.get("attention_mask")
    return None if mask is None else mask.sum(dim=1)


def trim_batch(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """`batch` cut to its longest row: tensors as wide as attention_mask to its longest row, labels
    (b, L) to its last labelled column, each a contiguous copy (HF's losses `view` the labels). Tensors of
    other shapes are returned unchanged."""
    mask = batch.get("attention_mask")
    trimmed = dict(batch)
    if mask is not None and mask.dim() == 2 and mask.shape[0]:
        width = mask.shape[1]
        length = max(int(mask.sum(dim=1).max()), 1)
        for name, tensor in batch.items():
            if name != "labels" and tensor.dim() == 2 and tensor.shape[1] == width:
                trimmed[name] = tensor[:, :length].contiguous()
    labels = batch.get("labels")
    if labels is not None and labels.dim() == 2 and labels.shape[0]:
        labelled = (labels != IGNORE_INDEX).any(dim=0).nonzero()
        trimmed["labels"] = labels[:, : int(labelled[-1]) + 1 if len(labelled) else 1].contiguous()
    return trimmed


class FeatureBatches:
    """features {name: (N, ...)} -> batches {name: (b, ...)}, the same rows of every tensor.

    trim: cut each batch to its longest row (see the module doc). group_size: sort the rows of
    each run of `group_size` rows of the epoch's permutation by length (None: no grouping;
    needs an attention_mask feature).
    """

    def __init__(
        self, features: Mapping[str, Tensor], seed: int, *, trim: bool = True, group_size: int | None = None
    ) -> None:
        if not features:
            raise ValueError("FeatureBatches needs at least one feature tensor")
        sizes = {name: int(t.shape[0]) for name, t in features.items()}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"feature tensors must have the same number of rows, got {sizes}")
        self.rows = next(iter(sizes.values()))
        if self.rows == 0:
            raise ValueError("FeatureBatches got no feature rows: nothing to train on")
        self.lengths = row_lengths(features)
        if group_size is not None:
            check_int("group_size", group_size)
            if self.lengths is None:
                raise ValueError("group_size needs an attention_mask feature to measure row lengths")
        self.features, self.seed, self.trim, self.group_size = dict(features), seed, trim, group_size
        self.epoch, self.index = 0, 0
        self._order: tuple[int, Tensor] | None = None

    def __len__(self) -> int:
        """The number of rows N."""
        return self.rows

    def epoch_order(self, epoch: int) -> Tensor:
        """The row order (N,) of epoch `epoch`: a permutation drawn from (seed, epoch), sorted by length
        (longest first) within each run of `group_size` rows when grouping."""
        if self._order is None or self._order[0] != epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.rows, generator=g)
            if self.group_size is not None:
                groups = order.split(self.group_size)
                order = torch.cat(
                    [group[torch.sort(self.lengths[group], descending=True, stable=True).indices] for group in groups]
                )
            self._order = (epoch, order)
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
        batch = {name: tensor[mine] for name, tensor in self.features.items()}
        return trim_batch(batch) if self.trim else batch

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "rows": self.rows,
            "group_size": self.group_size,
        }

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed:
            raise ValueError(
                f"the checkpoint's data order has seed {state['seed']}, this run {self.seed}: "
                "resume with the same trainer.seed"
            )
        if state.get("rows", self.rows) != self.rows:
            raise ValueError(
                f"the checkpoint was trained on {state['rows']} feature rows, this run has "
                f"{self.rows}: resume with the same data and windowing settings"
            )
        if state.get("group_size", self.group_size) != self.group_size:
            raise ValueError(
                f"the checkpoint's data order groups rows by length in runs of {state['group_size']}, "
                f"this run {self.group_size}: resume with the same batch size and grouping"
            )
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
