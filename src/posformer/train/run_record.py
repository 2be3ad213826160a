"""What a training run recorded about one of its checkpoints, for the model card (`config.model_card.TrainingRun`).

    run = training_run(Path("runs/x/checkpoints/step-00000500"))   # None for a folder outside a run
    run = training_run(Path("runs/x"))                             # its newest checkpoint, as posformer.load reads

A run directory holds run_config.yaml (its settings: `data` for `posformer train`, `qa` for `posformer qa train`),
metrics.jsonl (`metrics_log`) and checkpoints/step-N/ (each with a manifest.json naming its step). The card
describes the checkpoint that was saved or exported: its step, the run's data, and the last evaluation and training
loss logged at or before that step (a run that went on later logged more, which this model never saw).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posformer.checkpoints.manifest import MANIFEST
from posformer.checkpoints.model_dir import model_file, read_json
from posformer.config.model_card import TrainingRun
from posformer.train.metrics_log import MetricsLog
from posformer.train.training_checkpoint import PREFIX, CheckpointManager
from posformer.utils.user_files import read_yaml_file
from posformer.utils.validation import is_int, is_number

RUN_CONFIG = "run_config.yaml"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
QA_DATA = ("dataset_name", "dataset_config_name", "train_file", "eval_file", "max_train_samples", "max_seq_length")


def _step(folder: Path) -> int | None:
    """The checkpoint's step: its manifest's, else its folder name's (step-00000500)."""
    try:
        step = read_json(folder, MANIFEST).get("step")
    except (OSError, ValueError):
        step = None
    if is_int(step):
        return step
    digits = folder.name.removeprefix(PREFIX)
    return int(digits) if folder.name.startswith(PREFIX) and digits.isdigit() else None


def _settings(run_config: dict) -> tuple[dict[str, Any], int | None]:
    """(the run's data settings, the steps it was set to train) from its run_config.yaml."""
    data, trainer = run_config.get("data"), run_config.get("trainer")
    if isinstance(data, dict):
        steps = trainer.get("steps") if isinstance(trainer, dict) else None
        return dict(data), steps if is_int(steps) else None
    qa = run_config.get("qa")
    if isinstance(qa, dict):
        steps = qa.get("steps")
        return {key: qa[key] for key in QA_DATA if qa.get(key) is not None}, steps if is_int(steps) else None
    return {}, None


def training_run(folder: str | Path) -> TrainingRun | None:
    """The run record of checkpoint `folder` (a run's checkpoints/step-N/, or a run directory: its newest
    checkpoint); None for any other folder. Files the run could not finish (no run config, a log cut short) leave
    their part of the record empty."""
    folder = Path(folder)
    if model_file(folder, RUN_CONFIG).is_file() and (folder / CHECKPOINTS).is_dir():
        newest = CheckpointManager(folder, keep_last=1).checkpoints()
        if not newest:
            return None
        folder = newest[0].path
    run = folder.parent.parent
    if folder.parent.name != CHECKPOINTS or not model_file(run, RUN_CONFIG).is_file():
        return None
    step = _step(folder)
    try:
        run_config = read_yaml_file(model_file(run, RUN_CONFIG), "run config")
    except (OSError, ValueError):
        run_config = None
    data, steps = _settings(run_config) if isinstance(run_config, dict) else ({}, None)
    records = MetricsLog(model_file(run, METRICS)).records() if model_file(run, METRICS).is_file() else []
    seen = [r for r in records if step is None or r["step"] <= step]
    evaluations = [r for r in seen if isinstance(r.get("eval"), dict)]
    losses = [r["loss"] for r in seen if is_number(r.get("loss"))]
    last = evaluations[-1] if evaluations else {"eval": {}, "step": None}
    return TrainingRun(
        name=run.resolve().name,
        step=step,
        steps=steps,
        data=data,
        metrics={k: float(v) for k, v in last["eval"].items() if is_number(v)},
        metrics_step=last["step"],
        train_loss=float(losses[-1]) if losses else None,
    )
