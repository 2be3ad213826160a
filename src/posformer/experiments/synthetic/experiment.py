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

from posformer.experiments.rows import fit_row, seeded_model
from posformer.experiments.runner import Runner
from posformer.experiments.synthetic.dataset import TaskBatches, eval_examples
from posformer.experiments.synthetic.evaluation import exact_match
from posformer.experiments.synthetic.figure import plot
from posformer.experiments.synthetic.report import markdown
from posformer.experiments.synthetic.settings import TaskSettings, model_config
from posformer.train.trainer import Trainer, TrainingStopped


def run_tasks(
    settings: TaskSettings, output_dir: str | Path, log: Callable[[str], None] = print, progress: bool = True
) -> dict:
    """Run (or continue) the task experiment into `output_dir`; returns the results written to results.json."""
    s = settings
    runner = Runner(
        output_dir, s.threads, markdown, lambda results, layout: plot(results, layout.root / "accuracy.png")
    )
    layout = runner.layout
    results = runner.open(s, "tasks")
    runner.save(results)  # the configuration is on record before any training: a resume with other settings fails
    tests = {n: eval_examples(s.task, n, s.eval_examples, s.seed) for n in s.eval_lens}
    longest = max(len(e.prompt) + len(e.target) + 2 for examples in tests.values() for e in examples)
    reference = seeded_model(model_config(s, "none", longest), s.seed)

    def run_one(position: str) -> dict[str, dict]:
        model = seeded_model(model_config(s, position, longest), s.seed, reference)
        run_dir = layout.new_row_dir(position)
        log(f"\n== {s.task} / {position}: {model.num_parameters():,} parameters, training in {run_dir}")
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
            record = {"parameters": model.num_parameters(), **fit_row(trainer, run_dir), "error": None}
        except TrainingStopped as err:
            log(f"{position}: {err}")
            return {position: {"error": str(err), "accuracy": {str(n): None for n in s.eval_lens}}}
        started = time.monotonic()
        record["accuracy"] = {str(n): exact_match(model, examples) for n, examples in tests.items()}
        record["eval_wall_s"] = round(time.monotonic() - started, 2)
        return {position: record}

    runner.run_rows(results, s.positions, run_one, log)
    return results
