"""The knobs of the retrieval scoring of `posformer extrapolate` (`--preset retrieval`): beside its perplexity,
every row is scored at every eval length on the passkey grid (`passkey.passkey_grid`, depth by depth) and on tasks
of the long-context suite (`longeval.grid.suite_grid`), and its cells past L count only when it retrieves at L.
Read without torch (`posformer extrapolate --help`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from posformer.experiments.longeval.task_names import TASK_NAMES
from posformer.utils.limits import MAX_REPEATS
from posformer.utils.options import option
from posformer.utils.validation import fail

SINGLE_NEEDLE = ["single_noise", "single_number", "single_word", "single_uuid"]  # the suite's single needles
DEPTHS = [0.0, 0.25, 0.5, 0.75, 1.0]
RETRIEVAL_MULTIPLES = (1, 2, 4, 8)  # the default eval lengths of a retrieval run, in units of train_len


@dataclass
class RetrievalKnobs:
    """Whether and how each row is scored on retrieval beside its perplexity (`retrieval_trials` > 0)."""

    retrieval_trials: int = option(
        0,
        "passkey keys per eval length and depth, scored beside the perplexity (the retrieval preset: 20); "
        "0: perplexity only",
        flag=False,
        minimum=0,
        maximum=MAX_REPEATS,
    )
    retrieval_suite_trials: int = option(
        10, "prompts per eval length and depth of each of retrieval_tasks", flag=False, minimum=1, maximum=MAX_REPEATS
    )
    retrieval_depths: list[float] = option(
        default_factory=lambda: list(DEPTHS),
        help="where the key sits in the passkey and suite prompts, in [0, 1] (0: at the start, 1: before the question)",
        flag=False,
    )
    retrieval_tasks: list[str] = option(
        default_factory=lambda: list(SINGLE_NEEDLE),
        help="the long-context suite's tasks scored beside the passkey ([]: none)",
        flag=False,
    )
    retrieval_gate: float = option(
        0.9,
        "passkey exact match at L (mean over the depths) a row needs before its cells past L count",
        flag=False,
        low=0.0,
        high=1.0,
        low_open=True,
    )

    @property
    def scores_retrieval(self) -> bool:
        """Whether each row is scored on retrieval beside its perplexity."""
        return self.retrieval_trials > 0

    def check_retrieval(
        self, prefix: str, train_len: int, eval_lens: list[int], rows: list[str], reads_past_l: Callable[[str], bool]
    ) -> None:
        """Raise ValueError named `{prefix}{knob}` for the first bad retrieval knob, before any data is read or a row
        trained: a depth outside [0, 1], an unknown task, an eval length below L, and a row that cannot be a causal LM
        read past L here (`reads_past_l(row)` is False, or raises the ValueError that names why)."""
        depths = self.retrieval_depths
        if not isinstance(depths, list) or not depths or any(not _in_unit(d) for d in depths):
            fail(f"{prefix}retrieval_depths", depths, "a non-empty list of depths in [0, 1]")
        self.retrieval_depths = [float(d) for d in depths]  # one spelling of a depth in every record: "1.0"
        if not isinstance(self.retrieval_tasks, list) or any(t not in TASK_NAMES for t in self.retrieval_tasks):
            fail(f"{prefix}retrieval_tasks", self.retrieval_tasks, f"a list drawn from {', '.join(TASK_NAMES)}")
        short = [n for n in eval_lens if n < train_len]
        if short:
            fail(
                f"{prefix}eval_lens",
                eval_lens,
                f"lengths of at least train_len={train_len}: the retrieval table reads L and past it ({short[0]} is "
                "below L)",
            )
        for row in rows:
            try:
                reads = reads_past_l(row)
            except ValueError as err:
                raise ValueError(f"{prefix}positions: row {row!r} cannot be a causal LM here: {err}") from None
            if not reads and max(eval_lens) > train_len:
                raise ValueError(
                    f"{prefix}positions: row {row!r} cannot be read past train_len={train_len} (its positions are a "
                    f"table of L): the retrieval table reads every row at {', '.join(map(str, eval_lens))}; drop it"
                )


def _in_unit(depth: object) -> bool:
    return isinstance(depth, (int, float)) and not isinstance(depth, bool) and 0 <= depth <= 1
