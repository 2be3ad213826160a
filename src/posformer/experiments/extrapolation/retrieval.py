"""Retrieval beside perplexity in `posformer extrapolate` (`--preset retrieval`): each row scored at every eval
length on the passkey grid, depth by depth (`passkey.passkey_grid`), each key's line placed for a reader of the
last L tokens (`passkey.key_reach`), and on tasks of the long-context suite (`longeval.grid.suite_grid`), whose book
haystacks are the run's own held-out text.

A row's record gains "retrieval": {"passkey": {str(length): {str(depth): {"exact", "digits", "hits", "reach"}}},
"suite": {task: {str(length): {depth key: {"exact", "tokens", "chance"}}}}}; "reach" holds, key by key, where the
key line lies: "near" (within the prompt's last L tokens), "far" (before the L tokens that end at the question's
last token, where the first answer token is predicted) or "straddles".
"""

from __future__ import annotations

import time
from collections.abc import Callable

from torch import Tensor

from posformer.experiments.extrapolation.retrieval_knobs import RetrievalKnobs
from posformer.experiments.longeval.grid import check_haystack, grid_tokens, suite_grid
from posformer.experiments.longeval.items import Encode
from posformer.experiments.longeval.tasks import check_lengths
from posformer.experiments.passkey import grid_tokens as passkey_tokens
from posformer.experiments.passkey import key_reach, passkey_grid, passkey_prompt, random_keys
from posformer.model import Transformer
from posformer.utils.progress import progress_bar

ModelAt = Callable[[int], Transformer]  # the row's model as it reads a given length (an eval-time scaling: per length)


def reach_of_keys(encode: Encode, length: int, depth: float, keys: list[str], window: int) -> list[str]:
    """Where each key's line lies in its passkey prompt of `length` tokens at `depth`, for a reader of the last
    `window` tokens (`passkey.key_reach`), in the order of `keys`."""
    return [key_reach(passkey_prompt(encode, length, depth, key), window) for key in keys]


class RetrievalScorer:
    """The retrieval scoring of one run's rows: its settings, tokenizer and held-out haystack."""

    def __init__(
        self,
        settings: RetrievalKnobs,
        encode: Encode,
        haystack_ids: Tensor | None,
        train_len: int,
        lengths: list[int],
        seed: int,
        batch_tokens: int,
        progress: bool,
    ):
        """Checks, before any row is trained, that a passkey prompt and every task fit L with this tokenizer and that
        the haystack (N,), book tokens for the book tasks, holds the longest length (a ValueError naming what does
        not)."""
        if passkey_prompt(encode, train_len, 0.0, "10000") is None:
            raise ValueError(
                f"extrapolate: train_len={train_len} is too short for a passkey prompt with this tokenizer"
            )
        tasks = settings.retrieval_tasks
        if tasks:
            check_lengths(tasks, [train_len], encode)
            check_haystack(tasks, lengths, haystack_ids)
        self.s, self.encode, self.haystack_ids = settings, encode, haystack_ids
        self.train_len, self.lengths, self.seed, self.batch_tokens = train_len, lengths, seed, batch_tokens
        self.progress = progress

    def tokens(self) -> int:
        """The tokens one row's scoring reads (a progress bar's total)."""
        s, depths = self.s, self.s.retrieval_depths
        total = passkey_tokens(self.lengths, depths, s.retrieval_trials)
        if s.retrieval_tasks:
            total += grid_tokens(s.retrieval_tasks, self.lengths, depths, s.retrieval_suite_trials)
        return total

    def score(self, model_at: ModelAt, row: str) -> dict:
        """{"passkey": ..., "suite": ..., "wall_s"} of one row (the module docstring), each length read by
        model_at(length)."""
        s, depths, started = self.s, self.s.retrieval_depths, time.monotonic()
        keys = random_keys(s.retrieval_trials, self.seed)
        passkey: dict = {}
        suite: dict = {task: {} for task in s.retrieval_tasks}
        bar = progress_bar(
            total=self.tokens(), desc=f"retrieval {row}", unit="tok", unit_scale=True, dynamic_ncols=True,
            disable=not self.progress,
        )  # fmt: skip
        for n in self.lengths:
            bar.set_postfix_str(f"@ {n}")
            model = model_at(n)
            grid = passkey_grid(model, self.encode, [n], depths, s.retrieval_trials, self.seed, self.batch_tokens,
                                bar.update)[str(n)]  # fmt: skip
            for depth, cell in grid.items():
                cell["reach"] = reach_of_keys(self.encode, n, float(depth), keys, self.train_len)
            passkey[str(n)] = grid
            if s.retrieval_tasks:
                found = suite_grid(model, self.encode, [n], s.retrieval_tasks, depths, s.retrieval_suite_trials,
                                   self.seed, self.haystack_ids, self.batch_tokens, bar.update)  # fmt: skip
                for task, by_length in found.items():
                    suite[task] |= by_length
        bar.close()
        return {"passkey": passkey, "suite": suite, "wall_s": round(time.monotonic() - started, 2)}
