"""`qa train --resume`: which options a resumed run applies, which it refuses, and the warm-up it keeps.

Applied (and recorded in run_config.yaml): the length of the run (--max-steps, --num-train-epochs),
the evaluation and checkpoint cadence, the prediction-only options and the device. Refused, by
flag: everything the checkpoint's state was built from (data, model, tokenizer, windows, batch
size, learning rate and schedule, seed). The warm-up is --warmup-ratio of the first run's steps, so
that a resumed run may train longer without moving it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posformer.train.resume_check import ResumePolicy
from posformer.utils.options import flag_spelling
from posformer.utils.user_files import read_yaml_file

APPLIED = (
    "max_steps",
    "num_train_epochs",
    "steps",
    "warmup_steps",
    "eval_steps",
    "save_steps",
    "per_device_train_batch_size",  # as long as the step's batch (x processes) stays: the trainer checks it
    "per_device_eval_batch_size",
    "max_eval_samples",
    "num_beams",
    "n_best_size",
    "null_score_diff_threshold",
    "null_score",
    "device",
    "precision",
)
IGNORED = ("resume", "progress", "output_dir")
TRAINER_NAMES = {
    "lr": "--learning-rate",
    "seed": "--seed",
    "weight_decay": "--weight-decay",
    "warmup": "warm-up steps (--warmup-ratio x steps)",
    "global_batch": "batch of a step (--per-device-train-batch-size x processes)",
}


def _name(key: str) -> str:
    section, _, option = key.partition(".")
    if section != "qa":
        return key
    return "the steps" if option == "steps" else flag_spelling(option)


def qa_resume_policy() -> ResumePolicy:
    """The resume policy of the run config `train_qa` records ({"qa": options, "model": Config fields})."""
    return ResumePolicy(
        applied=frozenset(f"qa.{k}" for k in APPLIED),
        ignored=frozenset(f"qa.{k}" for k in IGNORED),
        name=_name,
        trainer_names=TRAINER_NAMES,
        advice="or start a fresh run in another --output-dir",
    )


def recorded_options(run: Path) -> dict[str, Any]:
    """The `qa` options a training run recorded in its run_config.yaml ({} when it has none)."""
    path = run / "run_config.yaml"
    saved = read_yaml_file(path, "the run config") if path.is_file() else None
    options = saved.get("qa") if isinstance(saved, dict) else None
    return options if isinstance(options, dict) else {}


def _resumed_options(output_dir: str, resume: bool) -> dict[str, Any]:
    """The `qa` options recorded by a run that --resume will continue (one with checkpoints)."""
    checkpoints = Path(output_dir) / "checkpoints"
    if not (resume and checkpoints.is_dir() and any(checkpoints.iterdir())):
        return {}
    return recorded_options(Path(output_dir))


def warmup_steps(output_dir: str, resume: bool, warmup_ratio: float, steps: int) -> int:
    """int(warmup_ratio * steps); a resumed run keeps the warm-up its run recorded for the same --warmup-ratio."""
    saved = _resumed_options(output_dir, resume)
    if isinstance(saved.get("warmup_steps"), int) and saved.get("warmup_ratio") == warmup_ratio:
        return saved["warmup_steps"]
    return int(warmup_ratio * steps)
