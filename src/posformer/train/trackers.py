"""Where a run's scalars go besides metrics.jsonl: TensorBoard and Weights & Biases.

    trainer: {tensorboard: null}          # null: event files in OUTPUT/tensorboard/ when `tensorboard` is installed
    trainer: {wandb_project: my-project}  # also log to W&B (needs `pip install wandb`; offline: WANDB_MODE=offline)

Each training step logs train/loss, train/lr, train/grad_norm and train/tokens_per_s; each evaluation eval/NAME.
A resumed run drops the TensorBoard events after its checkpoint's step (they are logged again) and continues the
same W&B run (its id is kept in OUTPUT/wandb_run_id).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from posformer.utils.safe_write import make_dirs, write_text_atomic
from posformer.utils.user_files import read_text_file

WANDB_ID_FILE = "wandb_run_id"


class Trackers:
    """TensorBoard's SummaryWriter and a W&B run, each when asked for (see the module docstring); `enabled`
    False (every rank but 0) writes nothing."""

    def __init__(
        self,
        output_dir: Path,
        tensorboard: bool | None,
        wandb_project: str | None,
        run_config: dict | None,
        resumed_at: int,
        enabled: bool = True,
    ) -> None:
        self.writer, self.wandb_run = None, None
        if not enabled:
            return
        if tensorboard is True or (tensorboard is None and _installed("tensorboard")):
            self.writer = _summary_writer(output_dir / "tensorboard", resumed_at)
        if wandb_project is not None:
            self.wandb_run = _wandb_run(output_dir, wandb_project, run_config)

    def scalars(self, step: int, values: dict[str, float], prefix: str) -> None:
        """Log `values` at `step`, each as PREFIX/NAME."""
        named = {f"{prefix}/{name}": float(value) for name, value in values.items()}
        if self.writer is not None:
            for name, value in named.items():
                self.writer.add_scalar(name, value, step)
        if self.wandb_run is not None:
            self.wandb_run.log(named, step=step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def check_trackers(tensorboard: bool | None, wandb_project: str | None) -> None:
    """An `ImportError` naming the setting and the install when a tracker asked for has no package: checked with
    the settings, before any work."""
    if tensorboard is True and not _installed("tensorboard"):
        raise ImportError("trainer.tensorboard=true needs the `tensorboard` package: pip install tensorboard")
    if wandb_project is not None and not _installed("wandb"):
        raise ImportError(f"trainer.wandb_project={wandb_project!r} needs the `wandb` package: pip install wandb")


def _summary_writer(log_dir: Path, resumed_at: int) -> Any:
    check_trackers(True, None)
    from torch.utils.tensorboard import SummaryWriter

    make_dirs(log_dir, log_dir.parent)  # not through a symlink out of the run dir
    return SummaryWriter(str(log_dir), purge_step=resumed_at + 1 if resumed_at else None)


def _wandb_run(output_dir: Path, project: str, run_config: dict | None) -> Any:
    check_trackers(None, project)
    import wandb

    id_file = output_dir / WANDB_ID_FILE
    run_id = read_text_file(id_file, "W&B run id file").strip() if id_file.is_file() else wandb.util.generate_id()
    write_text_atomic(id_file, run_id + "\n")
    return wandb.init(
        project=project, name=output_dir.name, id=run_id, resume="allow", dir=str(output_dir), config=run_config or {}
    )
