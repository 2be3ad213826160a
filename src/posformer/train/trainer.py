"""The trainer every posformer job shares: exact resume, safe checkpoints, torchrun DDP/FSDP, logs and plots.

    trainer = Trainer(model, batches, settings, "runs/x", evaluate=fn, run_config=cfg_dict)
    result = trainer.fit(resume=True)

`batches` is any object with `next_batch(global_size, rank, world_size) -> dict`
(model keyword arguments, labels included) and `state_dict` / `load_state_dict`
(see `WindowBatches`). `evaluate(model) -> {"name": value}` is the task's metric
function, run every `eval_every` steps and at the end.

On resume the checkpoint's settings are compared with this run's (`resume_check`): the
trainer settings its state fixes (lr, schedule, batch size, seed, ...), the model, and the
run config under the caller's `resume_policy`; a change is applied and recorded, or refused
by name. A file the run cannot write (checkpoint, metrics.jsonl, run_config.yaml) stops it
with a `RunFileError` naming the path; the previous checkpoint stays intact.

`fit` holds the output dir exclusively (`run_lock`): another process writing it is refused by name. Ctrl-C
and SIGTERM (preemption) stop the run after the step in flight, with a checkpoint at that step (`interrupt`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file

from posformer.checkpoints.native import config_json as checkpoint_config_json
from posformer.model import Transformer
from posformer.modules.heads import loss_only
from posformer.train import distributed
from posformer.train.interrupt import NAMES, HeldInterrupt, stopping_exception
from posformer.train.metrics_log import MetricsLog, plot_losses
from posformer.train.optim import build_optimizer, build_scheduler
from posformer.train.precision import autocast, resolve_precision
from posformer.train.resume_check import (
    RUN_CONFIG_FILE,
    ResumePolicy,
    check_checkpoint_settings,
    check_same_model,
    plain,
    trainer_settings_record,
)
from posformer.train.rng import rng_state, seed_everything, set_rng_state
from posformer.train.run_lock import RunDirLock, check_writable
from posformer.train.settings import TrainerSettings
from posformer.train.trackers import Trackers
from posformer.train.training_checkpoint import CheckpointManager, check_checkpoint_files
from posformer.train.write_errors import RunFileError, describe, writing
from posformer.utils.file_limits import not_blank
from posformer.utils.progress import progress_bar
from posformer.utils.safe_write import write_text_atomic


class TrainingStopped(RuntimeError):
    """Training cannot go on (a non-finite loss); the message names the step and the last good checkpoint."""


class CheckpointWriteError(RunFileError):
    """A checkpoint could not be written; the message names its path and the last good checkpoint (intact)."""


@dataclass
class FitResult:
    step: int
    losses: list[float] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    checkpoint: Path | None = None


class Trainer:
    def __init__(
        self,
        model: Transformer,
        batches,
        settings: TrainerSettings,
        output_dir: str | os.PathLike,
        *,
        evaluate: Callable[[torch.nn.Module], dict[str, float]] | None = None,
        run_config: dict | None = None,
        extra_files: dict[str, str] | None = None,
        log: Callable[[str], None] = print,
        progress: bool = True,
        resume_policy: ResumePolicy | None = None,
    ) -> None:
        settings.validate()
        check_checkpoint_files(extra_files or {})
        device = distributed.resolve_device(settings.device)
        settings = dataclasses.replace(settings, precision=resolve_precision(settings.precision, device))
        if settings.precision == "fp16" and device.type != "cuda":
            raise ValueError("trainer.precision='fp16' needs a CUDA device (its grad scaler); use bf16 or fp32 on CPU")
        self.model, self.batches, self.settings = model, batches, settings
        if settings.activation_checkpointing:
            if not hasattr(model, "set_activation_checkpointing"):
                raise ValueError(
                    f"trainer.activation_checkpointing=true needs a posformer Transformer, not a {type(model).__name__}"
                )
            model.set_activation_checkpointing(True)
        self.output_dir = Path(not_blank(output_dir, "the output directory"))
        check_writable(self.output_dir)  # claimed by `fit`
        self.evaluate_fn, self.run_config, self.extra_files = evaluate, run_config, extra_files or {}
        self.log, self.progress, self.resume_policy = log, progress, resume_policy
        self.checkpoints = CheckpointManager(self.output_dir, settings.keep_last, log)

    # ------------------------------------------------------------------ set-up
    def _setup(self, resume: bool) -> int:
        s, ctx = self.settings, self.ctx
        seed_everything(s.seed)
        self.model.to(ctx.device)
        self.wrapped = distributed.wrap(self.model, ctx, s.parallel)
        self.no_sync = (
            self.wrapped.no_sync if isinstance(self.wrapped, torch.nn.parallel.DistributedDataParallel) else None
        )
        if s.compile:
            self.wrapped = torch.compile(self.wrapped)
        self.optimizer = build_optimizer(self.model, s)
        self.scheduler = build_scheduler(self.optimizer, s)
        self.scaler = torch.amp.GradScaler("cuda") if s.precision == "fp16" else None
        self.metrics = MetricsLog(self.output_dir / "metrics.jsonl", enabled=ctx.is_main, warn=self.log)
        self.skipped = 0
        if not resume and self.checkpoints.checkpoints():
            newest = self.checkpoints.checkpoints()[0]
            raise ValueError(
                f"{self.output_dir} already holds checkpoints (newest: step {newest.step}); pass "
                "--resume (resume=True) to continue it, or choose another output dir"
            )
        start = self._resume() if resume else 0
        if start == 0 and ctx.is_main:
            self.metrics.truncate_after(0)
        self.trackers = Trackers(
            self.output_dir, s.tensorboard, s.wandb_project, self.run_config, start, enabled=ctx.is_main
        )
        if ctx.is_main and self.run_config is not None:
            path = self.output_dir / RUN_CONFIG_FILE
            with writing(path, "the run config"):
                write_text_atomic(path, yaml.safe_dump(self.run_config, sort_keys=False))
        return start

    def _resume(self) -> int:
        if self.ctx.is_main:
            self.checkpoints.remove_partial_writes()
        distributed.barrier(self.ctx)
        found = self.checkpoints.latest_valid()
        if found is None:
            unusable = self.checkpoints.checkpoints()
            if unusable:  # starting over would truncate the log and overwrite them: let the user decide
                raise ValueError(
                    f"--resume: none of the {len(unusable)} checkpoints in {self.checkpoints.root} is "
                    "usable (see the reasons above); move them away to start again from step 0, or "
                    "choose another output dir"
                )
            self.log(f"no checkpoint in {self.checkpoints.root}: starting from step 0")
            return 0
        checkpoint, state = found
        ours = self._trainer_settings()
        policy = self.resume_policy
        check_checkpoint_settings(self.output_dir, checkpoint.path, state, ours, self.run_config, policy, self.log)
        check_same_model(checkpoint.path, self.model.cfg.to_dict())
        distributed.load_full_state(
            self.model, self.optimizer, load_file(checkpoint.path / "model.safetensors"), state["optimizer"]
        )
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        try:
            self.batches.load_state_dict(state["data"])
        except KeyError as missing:
            raise ValueError(
                f"--resume: {checkpoint.path}/trainer_state.pt has no data field {missing}: it was "
                "written by another kind of run"
            ) from None
        set_rng_state(state["rng"])
        self.skipped = state.get("skipped", 0)
        if self.ctx.is_main:
            self.metrics.truncate_after(checkpoint.step)
        self.log(f"resumed from {checkpoint.path} (step {checkpoint.step})")
        return checkpoint.step

    def _trainer_settings(self) -> dict:
        return trainer_settings_record(self.settings, self.ctx.world_size)

    # -------------------------------------------------------------- checkpoints
    def _save(self, step: int) -> Path | None:
        path, failure = None, None
        weights, optimizer_state = distributed.full_state(self.model, self.optimizer)  # every rank: FSDP gathers
        if self.ctx.is_main:
            state = {
                "step": step,
                "optimizer": optimizer_state,
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler else None,
                "data": self.batches.state_dict(),
                "rng": rng_state(),
                "skipped": self.skipped,
                "trainer_settings": json.dumps(self._trainer_settings()),
            }
            if self.run_config is not None:
                state["run_config"] = json.dumps(plain(self.run_config))
            config_json = checkpoint_config_json(self.model.cfg)
            try:
                path = self.checkpoints.save(step, weights, config_json, state, self.extra_files)
            except (OSError, SafetensorError) as err:  # safetensors reports its I/O errors as its own type
                failure = err
                with contextlib.suppress(OSError):
                    self.checkpoints.remove_partial_writes()
        if not distributed.all_true(failure is None, self.ctx):  # every rank stops together
            where = self.checkpoints.root / f"step-{step:08d}"
            why = describe(failure, where) if failure is not None else f"{where}: failed on rank 0"
            raise CheckpointWriteError(
                f"could not write checkpoint {why}; stopped at step {step}. The last good "
                f"checkpoint, intact: {self._last_good()}"
            )
        distributed.barrier(self.ctx)
        return path

    def _last_good(self) -> str:
        found = self.checkpoints.checkpoints()
        return str(found[0].path) if found else "none (no checkpoint was written yet)"

    # ------------------------------------------------------------------ a step
    def _autocast(self):
        return autocast(self.settings.precision, self.ctx.device)

    def _train_step(self) -> tuple[float, int, float]:
        """One optimizer step over grad_accum micro-batches -> (mean loss over processes, tokens, the gradient's
        norm before clipping), or (nan, n, nan).

        tokens: the real tokens of the step (attention_mask ones; every token of a batch without a mask)."""
        s, ctx = self.settings, self.ctx
        total, tokens, finite = torch.zeros((), device=ctx.device), 0, True
        loss_only_arguments = loss_only(self.model.cfg.head_kind)
        for micro in range(s.grad_accum):
            batch = self.batches.next_batch(s.batch_size * ctx.world_size, ctx.rank, ctx.world_size)
            batch = {k: v.to(ctx.device) for k, v in batch.items()}
            mask = batch.get("attention_mask")
            tokens += (batch["input_ids"].numel() if mask is None else int(mask.sum())) * ctx.world_size
            sync = micro == s.grad_accum - 1 or self.no_sync is None
            with contextlib.nullcontext() if sync else self.no_sync(), self._autocast():
                loss = self.wrapped(**batch, **loss_only_arguments).loss / s.grad_accum
            finite = finite and distributed.all_true(bool(torch.isfinite(loss)), ctx)
            if finite:
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            total += loss.detach().float()
        mean = distributed.mean_across(total, ctx)
        if not math.isfinite(float(mean)):
            self.optimizer.zero_grad(set_to_none=True)
            return float("nan"), tokens, float("nan")
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        clip = s.clip_grad if s.clip_grad is not None else math.inf  # inf: the norm alone, nothing clipped
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip))
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(mean), tokens, grad_norm

    def _non_finite(self, step: int) -> None:
        s = self.settings
        self.skipped += 1
        if s.nan_policy == "stop" or self.skipped > s.max_skipped_batches:
            why = "" if s.nan_policy == "stop" else f" ({self.skipped} bad batches, over max_skipped_batches)"
            raise TrainingStopped(
                f"non-finite loss at step {step}{why}; stopped. The last good checkpoint, intact: {self._last_good()}"
            )
        self.log(f"non-finite loss at step {step}: batch skipped ({self.skipped}/{s.max_skipped_batches})")

    def _evaluate(self, step: int, bar) -> dict:
        if self.evaluate_fn is None:
            return {}
        self.model.eval()
        with torch.no_grad(), self._autocast():
            metrics = self.evaluate_fn(self.model)
        self.model.train()
        self.metrics.write({"step": step, "eval": metrics})
        self.trackers.scalars(step, metrics, "eval")
        if self.ctx.is_main:
            bar.write(f"step {step:6d}  " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        return metrics

    # ---------------------------------------------------------------------- fit
    def fit(self, resume: bool = False) -> FitResult:
        """Train to `settings.steps`, evaluating, logging and checkpointing; resume from the newest valid checkpoint.

        The output dir is held for the whole fit (`RunDirLock`), its check for earlier checkpoints included. Ctrl-C
        or SIGTERM stops after the step in flight, with a checkpoint at that step (`_stop`)."""
        with RunDirLock(self.output_dir):
            return self._fit(resume)

    def _fit(self, resume: bool) -> FitResult:
        s = self.settings
        self.ctx = distributed.init(s.device)
        step = self._setup(resume)
        result = FitResult(step)
        self.model.train()
        bar = progress_bar(
            total=s.steps,
            initial=step,
            desc="training",
            unit="step",
            dynamic_ncols=True,
            disable=not (self.progress and self.ctx.is_main),
        )
        started, saved_at = time.monotonic(), step
        held = HeldInterrupt()
        try:
            held.install()
            while step < s.steps:
                stop = distributed.max_across(held.signal or 0, self.ctx)  # every rank stops at the same step
                if stop:
                    self._stop(stop, step, saved_at)
                t0 = time.monotonic()
                lr = self.optimizer.param_groups[0]["lr"]
                loss, tokens, grad_norm = self._train_step()
                if not math.isfinite(loss):
                    self._non_finite(step + 1)
                    continue
                step += 1
                speed = tokens / max(time.monotonic() - t0, 1e-9)
                result.losses.append(loss)
                record = {"loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens_per_s": round(speed, 1)}
                self.metrics.write({"step": step, **record})
                self.trackers.scalars(step, record, "train")
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}")
                out_of_time = s.max_minutes is not None and time.monotonic() - started > 60 * s.max_minutes
                last = step == s.steps or out_of_time
                if step % s.eval_every == 0 or last:
                    result.evals.append({"step": step, **self._evaluate(step, bar)})
                if step % s.checkpoint_every == 0 or last:
                    result.checkpoint, saved_at = self._save(step), step
                if out_of_time:
                    bar.write(f"stopping at step {step}: trainer.max_minutes={s.max_minutes} reached")
                    break
        finally:
            held.restore()
            bar.close()
            self.trackers.close()
        result.step = step
        self._plot()
        return result

    def _stop(self, signum: int, step: int, saved_at: int) -> None:
        """End the run on `signum` (Ctrl-C, SIGTERM) at `step`, a finished step: checkpoint it (unless it is saved
        already), draw the loss curve, say where it stopped and raise the signal's exception (`stopping_exception`)."""
        name = NAMES[signum]
        if step > saved_at:
            self._save(step)
        if step == 0:
            message = f"{name} before the first step: no checkpoint to write"
        else:
            where = self.checkpoints.root / f"step-{step:08d}"
            message = f"{name} at step {step}: saved checkpoint {where}; resume with --resume"
        self._plot()
        if self.ctx.is_main:
            self.log(message)
        raise stopping_exception(signum, message)

    def _plot(self) -> None:
        """loss.png from metrics.jsonl (rank 0); a plot that cannot be written is a warning, as the run's checkpoint
        and log are written."""
        if not self.ctx.is_main:
            return
        try:
            plot = plot_losses(self.metrics.records(), self.output_dir / "loss.png", f"{self.output_dir.name}")
        except RunFileError as err:
            self.log(f"warning: {err}")
            return
        if plot is not None:
            self.log(f"loss curve: {plot}")
