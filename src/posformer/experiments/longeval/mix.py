"""Training batches with a fraction of their rows replaced by training-split prompts of the suite's tasks."""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.experiments.longeval.draws import randint
from posformer.experiments.longeval.items import Encode
from posformer.experiments.longeval.tasks import TASKS, check_lengths, get_task, training_prompt
from posformer.experiments.row_mix import RowMix


class SuiteMix(RowMix):
    """Replaces a fraction of each batch's rows by `training_prompt`s of the same length, each of a task drawn
    uniformly from `tasks` (all by default), its needle at a uniform depth (`RowMix`: resumable, the same prompts
    after a resume).

    haystack_ids: (N,) book tokens of the training split (the run's training stream, or `haystacks.book_ids(encode,
    "train")`), needed when a task hides its needles in book text.
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
        start: int = 0,
    ) -> None:
        super().__init__(batches, seq_len, fraction, seed, "longeval: fraction", start)
        self.tasks = list(TASKS) if tasks is None else list(tasks)
        check_lengths(self.tasks, [seq_len], encode)
        books = [t for t in self.tasks if get_task(t).haystack == "book"]
        if books and (haystack_ids is None or haystack_ids.numel() < seq_len):
            raise ValueError(
                f"longeval: task {books[0]!r} hides its needles in book text: give haystack_ids of at least "
                f"seq_len={seq_len} training tokens"
            )
        self.encode, self.haystack_ids = encode, haystack_ids

    def make_row(self, g: torch.Generator) -> Tensor:
        task = self.tasks[randint(g, len(self.tasks))]
        return training_prompt(task, self.encode, self.seq_len, g, self.haystack_ids).ids
