"""Training batches with a fraction of their rows replaced by training-split prompts of the suite's tasks."""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.experiments.longeval.draws import randint
from posformer.experiments.longeval.items import Encode
from posformer.experiments.longeval.tasks import TASKS, check_lengths, get_task, training_prompt


class SuiteMix:
    """Wraps any batches object of the Trainer (next_batch, state_dict, load_state_dict) and replaces a fraction of
    each batch's rows by `training_prompt`s of the same length, each of a task drawn uniformly from `tasks` (all by
    default), its needle at a uniform depth. The rows and prompts drawn are a function of (seed, batch number), so a
    resumed run draws the same prompts (`PasskeyMix`'s pattern).

    haystack_ids: (N,) book tokens of the training split (the run's training stream, or `haystacks.book_ids(encode,
    "train")`), needed when a task hides its needles in book text. The whole row is trained on, as any LM row.
    """

    def __init__(
        self,
        batches,
        encode: Encode,
        seq_len: int,
        fraction: float,
        seed: int,
        tasks: list[str] | None = None,
        haystack_ids: Tensor | None = None,
    ) -> None:
        if not 0 <= fraction <= 1:
            raise ValueError(f"longeval: fraction={fraction} is out of range: expected a number in [0, 1]")
        self.tasks = list(TASKS) if tasks is None else list(tasks)
        check_lengths(self.tasks, [seq_len], encode)
        books = [t for t in self.tasks if get_task(t).haystack == "book"]
        if books and (haystack_ids is None or haystack_ids.numel() < seq_len):
            raise ValueError(
                f"longeval: task {books[0]!r} hides its needles in book text: give haystack_ids of at least "
                f"seq_len={seq_len} training tokens"
            )
        self.batches, self.encode, self.seq_len, self.fraction, self.seed = batches, encode, seq_len, fraction, seed
        self.haystack_ids = haystack_ids
        self.drawn = 0

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        """The wrapped batch (input_ids and labels (b, seq_len)) with the drawn rows replaced."""
        batch = self.batches.next_batch(global_size, rank, world_size)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.drawn * world_size + rank)
        self.drawn += 1
        ids = batch["input_ids"].clone()
        for row in torch.nonzero(torch.rand(ids.shape[0], generator=g) < self.fraction).flatten().tolist():
            task = self.tasks[randint(g, len(self.tasks))]
            ids[row] = training_prompt(task, self.encode, self.seq_len, g, self.haystack_ids).ids
        return {"input_ids": ids, "labels": ids}

    def state_dict(self) -> dict:
        return {"batches": self.batches.state_dict(), "drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.batches.load_state_dict(state["batches"])
        self.drawn = int(state["drawn"])
