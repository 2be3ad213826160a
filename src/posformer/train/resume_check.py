"""What a resumed run may change: settings that apply on resume are applied (and recorded), the rest refused.

A checkpoint fixes what its state was built from: the weights (model fields, the data and
tokenizer that sized them), the optimizer and its schedule (lr, betas, weight decay, warm-up,
schedule), the data order (seed, batch size, sequence length). Changing one of those on
`--resume` cannot be honoured, so it is refused, naming the setting, its value in the
checkpoint and the value asked for. Settings read afresh at every step or at the end
(steps, evaluation and checkpoint cadence, time limit, device, samples) are applied. The batch
of an optimizer step (batch_size x grad_accum x processes) is fixed; how it is split is not.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from posformer.checkpoints.model_dir import read_json
from posformer.utils.user_files import read_yaml_file

RESUMABLE_TRAINER_FIELDS = frozenset(
    {
        "steps",
        "eval_every",
        "eval_batches",
        "save_every",
        "keep_last",
        "log_every",
        "max_minutes",
        "sample_prompt",
        "sample_tokens",
        "nan_policy",
        "max_skipped_batches",
        "clip_grad",
        "precision",
        "device",
        "parallel",
        "compile",
        "activation_checkpointing",  # the same losses either way
        "tensorboard",
        "wandb_project",
        "batch_size",
        "grad_accum",  # may trade against each other and the process count: the step's batch is checked
    }
)


class ResumeConflict(ValueError):
    """`--resume` with a setting the checkpoint fixes changed; the message names each one, old and new."""


@dataclass(frozen=True)
class ResumePolicy:
    """How a run's `run_config` may differ from the one its checkpoint was trained with.

    applied: dotted keys (or whole sections) that take the new value on resume; ignored: keys that are
    not settings of the run (the resume flag itself, progress bars); `name` spells a key in messages
    (e.g. as its command-line flag). Every other difference is refused. trainer_names: how a refusal names a
    `TrainerSettings` field the job derives from its own options (default: trainer.FIELD).
    """

    applied: frozenset[str] = frozenset()
    ignored: frozenset[str] = frozenset()
    name: Callable[[str], str] = str
    advice: str = "or start a fresh run in another output dir"
    trainer_names: Mapping[str, str] = field(default_factory=dict)

    def allows(self, key: str, keys: Iterable[str]) -> bool:
        return any(key == k or key.startswith(k + ".") for k in keys)


def trainer_policy() -> ResumePolicy:
    """The policy of `posformer train`'s run config (sections model, data, trainer)."""
    return ResumePolicy(applied=frozenset(f"trainer.{name}" for name in RESUMABLE_TRAINER_FIELDS))


def plain(value: Any) -> Any:
    """`value` as JSON has it (tuples as lists), so a stored config and a fresh one compare equal."""
    return json.loads(json.dumps(value, default=str))


def settings_dict(settings: Any) -> dict:
    """A settings dataclass as plain JSON values."""
    return plain(dataclasses.asdict(settings))


def differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, old, new) of every leaf that differs between two nested mappings; a missing key is None."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += differences(old.get(key), new.get(key), f"{prefix}{key}.")
        return found
    return [] if old == new else [(prefix.rstrip("."), old, new)]


@dataclass
class ResumeCheck:
    """The outcome of comparing two configs under a policy: what is applied, what is refused."""

    applied: list[tuple[str, Any, Any]] = field(default_factory=list)
    refused: list[tuple[str, Any, Any]] = field(default_factory=list)


def compare(old: dict, new: dict, policy: ResumePolicy) -> ResumeCheck:
    check = ResumeCheck()
    for key, before, after in differences(plain(old), plain(new)):
        if policy.allows(key, policy.ignored):
            continue
        (check.applied if policy.allows(key, policy.applied) else check.refused).append((key, before, after))
    return check


def check_resume(
    old: dict, new: dict, policy: ResumePolicy, checkpoint: str, log: Callable[[str], None] = print
) -> None:
    """Raise `ResumeConflict` for every refused difference of `new` from `old` (the checkpoint's); log the applied."""
    check = compare(old, new, policy)
    if check.refused:
        names = [policy.name(k) for k, _, _ in check.refused]
        changes = "; ".join(
            f"{name}: {_show(a)} in the checkpoint, {_show(b)} now" for name, (_, a, b) in zip(names, check.refused)
        )
        raise ResumeConflict(
            f"--resume: {checkpoint} was trained with other values of settings its state fixes "
            f"({changes}); resume with the same {' and '.join(names)}, {policy.advice}"
        )
    for key, before, after in check.applied:
        log(f"resume: {policy.name(key)} changed from {_show(before)} to {_show(after)} (applied)")


def _show(value: Any) -> str:
    return "unset" if value is None else json.dumps(value) if isinstance(value, str) else str(value)


def check_same_model(checkpoint: Path, model_fields: dict) -> None:
    """Refuse `checkpoint` when its model (config.json's "posformer" fields) differs from `model_fields`
    (`Config.to_dict()`), naming each differing field with both values."""
    saved = read_json(checkpoint, "config.json").get("posformer") or {}
    ours = plain(model_fields)
    differ = [(k, a, b) for k, a, b in differences(plain(saved), ours) if k in ours]
    if differ:
        values = ", ".join(f"{k}={a!r} in the checkpoint, {b!r} now" for k, a, b in differ)
        raise ResumeConflict(
            f"checkpoint {checkpoint} was written by a different model (fields "
            f"{[k for k, _, _ in differ]}: {values}); resume with the same model settings, "
            "or start a fresh run in another output dir"
        )


TRAINER_POLICY = ResumePolicy(applied=RESUMABLE_TRAINER_FIELDS, name=lambda key: f"trainer.{key}")
GLOBAL_BATCH = "global_batch"  # what the data position counts: sequences per optimizer step, every process's
GLOBAL_BATCH_NAME = "batch of an optimizer step (trainer.batch_size x trainer.grad_accum x processes)"
RUN_CONFIG_FILE = "run_config.yaml"


def trainer_settings_record(settings: Any, world_size: int) -> dict:
    """The trainer settings a checkpoint records, with the batch of an optimizer step over every process."""
    return {**settings_dict(settings), GLOBAL_BATCH: settings.batch_size * settings.grad_accum * world_size}


def check_checkpoint_settings(
    run_dir: Path,
    checkpoint: Path,
    state: dict,
    ours: dict,
    run_config: dict | None,
    policy: ResumePolicy | None,
    log: Callable[[str], None],
) -> None:
    """Refuse, by name, a resume whose settings the checkpoint's state fixes were changed: the trainer settings
    (`ours`, a `trainer_settings_record`), then the run config under the caller's `policy` (its "model"
    section aside: `check_same_model` compares the model), the checkpoint's own copy or else `run_dir`'s
    run_config.yaml. What may change is applied, and said."""
    saved_settings = _json_dict(state.get("trainer_settings"))
    if saved_settings is not None:
        saved_settings.setdefault(GLOBAL_BATCH, ours[GLOBAL_BATCH])
        names = {GLOBAL_BATCH: GLOBAL_BATCH_NAME, **(policy.trainer_names if policy else {})}
        trainer = dataclasses.replace(TRAINER_POLICY, name=lambda key: names.get(key, f"trainer.{key}"))
        quiet = policy is not None  # the run config's check says what it applies
        check_resume(saved_settings, ours, trainer, str(checkpoint), (lambda message: None) if quiet else log)
    saved_config = _saved_run_config(run_dir, state, log)
    if policy is not None and run_config is not None and saved_config is not None:
        without_model = [{k: v for k, v in c.items() if k != "model"} for c in (saved_config, run_config)]
        check_resume(*without_model, policy, str(checkpoint), log)


def _saved_run_config(run_dir: Path, state: dict, log: Callable[[str], None]) -> dict | None:
    """The run config the checkpoint was trained with: its own copy, else the run dir's run_config.yaml."""
    if "run_config" in state:
        return _json_dict(state["run_config"])
    path = run_dir / RUN_CONFIG_FILE
    if not path.is_file():
        return None
    try:
        saved = read_yaml_file(path, "the run config")
    except ValueError as err:
        log(f"warning: {err}; the run config is not compared on resume")
        return None
    return saved if isinstance(saved, dict) else None


def _json_dict(text: Any) -> dict | None:
    """The mapping a checkpoint stored as JSON text (its settings, its run config); None when there is none."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
