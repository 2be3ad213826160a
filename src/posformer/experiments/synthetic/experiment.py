"""`posformer extrapolate --task`: train one small decoder per position encoding on a synthetic task at lengths
up to train_len, then measure exact-match accuracy at each evaluation length.

Every row shares the batches (one seed), the steps and schedule, and the initial weights of every tensor the
rows share; only the position encoding differs. Results go to OUTPUT/results.json and results.md after each
row (atomically) and accuracy.png; row r's Trainer run is OUTPUT/rows/r. Re-running into the same OUTPUT skips
recorded rows and resumes a half-trained one; a different configuration is refused.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import torch

from posformer.checkpoints.atomic import write_json_atomic, write_text_atomic
from posformer.experiments.extrapolation.experiment import open_results, reference_copy
from posformer.experiments.extrapolation.layout import ExperimentLayout
from posformer.experiments.synthetic.dataset import TaskBatches, eval_examples
from posformer.experiments.synthetic.evaluation import exact_match
from posformer.experiments.synthetic.report import markdown, plot
from posformer.experiments.synthetic.settings import TaskSettings, model_config
from posformer.model import Transformer
from posformer.train.metrics_log import MetricsLog
from posformer.train.rng import seed_everything
from posformer.train.run_lock import check_output_dir
from posformer.train.trainer import Trainer, TrainingStopped


def _save(results: dict, layout: ExperimentLayout) -> None:
    write_json_atomic(layout.results_json, results)
    write_text_atomic(layout.results_md, markdown(results))
    if results["rows"]:
        plot(results, layout.root / "accuracy.png")


def run_tasks(
    settings: TaskSettings, output_dir: str | Path, log: Callable[[str], None] = print, progress: bool = True
) -> dict:
    """Run (or continue) the task experiment into `output_dir`; returns the results written to results.json."""
    s, layout = settings, ExperimentLayout(Path(output_dir))
    check_output_dir(layout.root)
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    results = open_results(s, layout, benchmark="tasks")
    _save(results, layout)  # the configuration is on record before any training: a resume with other settings fails
    tests = {n: eval_examples(s.task, n, s.eval_examples, s.seed) for n in s.eval_lens}
    longest = max(len(e.prompt) + len(e.target) + 2 for examples in tests.values() for e in examples)
    seed_everything(s.seed)
    reference = Transformer(model_config(s, "none", longest))
    for position in s.positions:
        if position in results["rows"]:
            log(f"{position}: already recorded in {layout.results_json}, skipped")
            continue
        seed_everything(s.seed)
        model = Transformer(model_config(s, position, longest))
        reference_copy(model, reference)
        run_dir = layout.row_dir(position)
        log(f"\n== {s.task} / {position}: {model.num_parameters():,} parameters, training in {run_dir}")
        started = time.monotonic()
        trainer = Trainer(
            model,
            TaskBatches(s.task, s.train_len, s.seed),
            s.trainer_settings(),
            run_dir,
            run_config={"task": s.to_dict(), "model": model.cfg.to_dict()},
            log=log,
            progress=progress,
        )
        try:
            fit = trainer.fit(resume=True)
        except TrainingStopped as err:
            log(f"{position}: {err}")
            results["rows"][position] = {"error": str(err), "accuracy": {str(n): None for n in s.eval_lens}}
            _save(results, layout)
            continue
        losses = [r["loss"] for r in MetricsLog(run_dir / "metrics.jsonl").records() if "loss" in r]
        record = {
            "parameters": model.num_parameters(),
            "steps": fit.step,
            "final_loss": losses[-1] if losses else None,
            "train_wall_s": round(time.monotonic() - started, 2),
            "error": None,
        }
        started = time.monotonic()
        record["accuracy"] = {str(n): exact_match(model, examples) for n, examples in tests.items()}
        record["eval_wall_s"] = round(time.monotonic() - started, 2)
        results["rows"][position] = record
        _save(results, layout)
    return results
