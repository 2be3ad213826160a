"""What `posformer longeval` is asked: the model, the lengths, tasks, depths and trials, the effective-length rule,
and how to run. One dataclass: the command line's flags are made from it (`cli.option_flags`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from posformer.experiments.longeval.effective import RULER_THRESHOLD
from posformer.experiments.longeval.task_names import TASK_NAMES
from posformer.train.knobs import DEVICES
from posformer.utils.limits import MAX_BATCH_TOKENS, MAX_REPEATS, MAX_SEED
from posformer.utils.options import option

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(kw_only=True)
class LongevalSettings:
    model: str = option(
        help="a posformer checkpoint, run directory (its newest checkpoint) or model directory, or a Hugging Face "
        "checkpoint directory; its tokenizer is read beside it",
        flag="MODEL",
    )
    output_dir: str = option(help="where results.json and results.md are written")
    lengths: list[str] = option(
        default_factory=lambda: ["256", "512", "1k", "2k", "4k"],
        help="prompt lengths in tokens: integers or Nk with k = 1024 (256,1k,4k)",
        metavar="N",
    )
    tasks: list[str] = option(
        default_factory=lambda: list(TASK_NAMES),
        help="tasks to run (default: all)",
        choices=TASK_NAMES,
        metavar="TASK",
    )
    depths: list[float] = option(
        default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0],
        help="depths in [0, 1] of the asked needle, for the tasks with one (single_*, multikey)",
        low=0.0,
        high=1.0,
        metavar="D",
    )
    trials: int = option(20, "prompts per task, length and depth", minimum=1, maximum=MAX_REPEATS)
    seed: int = option(
        0, "the prompts' seed: the same seed, tokenizer and settings give the same prompts", minimum=0, maximum=MAX_SEED
    )
    threshold: float = option(
        RULER_THRESHOLD,
        "the effective length's threshold: a mean exact match (RULER's 0.856), or with --reference-length a fraction "
        "of the model's own mean there",
        low=0.0,
        high=1.0,
        low_open=True,
    )
    reference_length: str | None = option(
        None, "a length of --lengths (the training length, say): the threshold becomes a fraction of the mean there"
    )
    batch_tokens: int = option(
        8192,
        "tokens per forward pass (batch_tokens // length prompts, one at least)",
        minimum=1,
        maximum=MAX_BATCH_TOKENS,
    )
    device: str = option("auto", "where the model runs", choices=DEVICES)
    dtype: str = option("float32", "the model's weights' dtype", choices=DTYPES)
    data_dir: str | None = option(
        None,
        "folder holding gutenberg/, for the book haystacks (the held-out books of `posformer extrapolate`); default: "
        "$POSFORMER_DATA_DIR or ../shared/data beside the repository",
    )
    progress: bool = option(True, "no progress bar", flag="--no-progress")

    def to_dict(self) -> dict:
        return asdict(self)
