"""Training batches with a fraction of their rows replaced by made-up rows: the base of `PasskeyMix` and
`SuiteMix`."""

from __future__ import annotations

import zlib

import torch
from torch import Tensor

from posformer.utils.validation import check_number


class RowMix:
    """Wraps any batches object of the Trainer (next_batch, state_dict, load_state_dict) and replaces each row of a
    batch, with probability `fraction`, by `make_row(g)` (seq_len,) tokens. The rows replaced and what replaces
    them are a function of (seed, batch number, rank, name), so a resumed run draws the same rows. The whole row is
    trained on, as any LM row. No row is replaced before batch number `start`. `name`: the knob that set the
    fraction, for errors; it also keeps mixes stacked
    on one batches object independent: each draws its own rows, a later one replacing an earlier one's with its
    own probability."""

    def __init__(self, batches, seq_len: int, fraction: float, seed: int, name: str, start: int = 0) -> None:
        check_number(name, fraction, 0.0, 1.0)
        self.batches, self.seq_len, self.fraction, self.seed, self.start = batches, seq_len, fraction, seed, start
        self.salt = zlib.crc32(name.encode())
        self.drawn = 0

    def make_row(self, g: torch.Generator) -> Tensor:
        """One row (seq_len,) of token ids, drawn from `g` (`drawn` batches before this one)."""
        raise NotImplementedError

    def fraction_now(self) -> float:
        """The fraction of the batch about to be drawn (`drawn` batches before it)."""
        return self.fraction if self.drawn >= self.start else 0.0

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        """The wrapped batch (input_ids and labels (b, seq_len)) with the drawn rows replaced."""
        batch = self.batches.next_batch(global_size, rank, world_size)
        draw = self.seed * 1_000_003 + self.drawn * world_size + rank
        g = torch.Generator().manual_seed((draw * 4_294_967_311 + self.salt) % 2**63)
        ids = batch["input_ids"].clone()
        for row in torch.nonzero(torch.rand(ids.shape[0], generator=g) < self.fraction_now()).flatten().tolist():
            ids[row] = self.make_row(g)
        self.drawn += 1
        return {"input_ids": ids, "labels": ids}

    def state_dict(self) -> dict:
        return {"batches": self.batches.state_dict(), "drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.batches.load_state_dict(state["batches"])
        self.drawn = int(state["drawn"])
