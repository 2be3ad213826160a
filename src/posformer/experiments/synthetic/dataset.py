"""Training batches and evaluation sets of a synthetic task, with no example shared between them.

Every prompt belongs to one side by a stable hash of its tokens: one prompt in `EVAL_SHARE` is reserved for
evaluation, at every length, so no evaluation example is ever trained on, whether its length was trained or
not. Training batches are a function of (seed, step) alone (resumable); evaluation sets of (seed, task, length).
"""

from __future__ import annotations

import hashlib
import random

import torch
from torch import Tensor

from posformer.experiments.synthetic.generators import EOS, PAD, SEP, TASKS, Example, min_length
from posformer.modules.heads import IGNORE_INDEX

EVAL_SHARE = 10
MAX_DRAWS = 1000


def is_eval_prompt(prompt: tuple[int, ...]) -> bool:
    """Whether `prompt` belongs to evaluation (a stable hash: the same answer in every process and run)."""
    return hashlib.blake2b(bytes(prompt), digest_size=8).digest()[0] % EVAL_SHARE == 0


def draw(task: str, rng: random.Random, n: int, evaluation: bool) -> Example:
    """One example of `task` at length n from the evaluation side or the training side."""
    for _ in range(MAX_DRAWS):
        example = TASKS[task](rng, n)
        if is_eval_prompt(example.prompt) == evaluation:
            return example
    raise ValueError(
        f"task {task!r}: no {'evaluation' if evaluation else 'training'} example of length {n} in "
        f"{MAX_DRAWS} draws (too few distinct prompts at that length)"
    )


def eval_examples(task: str, n: int, count: int, seed: int) -> list[Example]:
    """`count` evaluation examples of `task` at length n, the same for every row of a run."""
    rng = random.Random(f"{seed}:{task}:{n}")
    return [draw(task, rng, n, evaluation=True) for _ in range(count)]


def encode(examples: list[Example]) -> dict[str, Tensor]:
    """Right-padded `prompt SEP target EOS` rows: input_ids and attention_mask (B, T); labels (B, T) hold the
    target and EOS (what the model learns to write) and IGNORE_INDEX elsewhere."""
    rows = [list(e.prompt) + [SEP] + list(e.target) + [EOS] for e in examples]
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, e) in enumerate(zip(rows, examples)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        start = len(e.prompt) + 1
        labels[i, start : len(row)] = ids[i, start : len(row)]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class TaskBatches:
    """Training batches for the Trainer: each example at a length drawn uniformly from [min, max_len]."""

    def __init__(self, task: str, max_len: int, seed: int) -> None:
        if task not in TASKS:
            raise ValueError(f"task={task!r} is invalid: expected one of {', '.join(TASKS)}")
        if max_len < min_length(task):
            raise ValueError(f"train_len={max_len} is invalid for task {task!r}: expected >= {min_length(task)}")
        self.task, self.max_len, self.seed, self.index = task, max_len, seed, 0

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        rng = random.Random(self.seed * 1_000_003 + self.index)
        self.index += 1
        examples = [
            draw(self.task, rng, rng.randint(min_length(self.task), self.max_len), evaluation=False)
            for _ in range(global_size)
        ]
        share = global_size // world_size
        return encode(examples[rank * share : (rank + 1) * share])

    def state_dict(self) -> dict:
        return {"index": self.index, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed:
            raise ValueError(
                f"the checkpoint's batches have seed {state['seed']}, this run {self.seed}: resume with the same seed"
            )
        self.index = int(state["index"])
