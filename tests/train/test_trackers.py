"""TensorBoard event files and W&B logging beside metrics.jsonl (`train.trackers`): the same scalars, a resumed
run's later events dropped and logged again, and a clear error when a tracker asked for is not installed."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from posformer.tasks.causal_lm import train_causal_lm
from posformer.train.settings import RunSettings
from train_helpers import records, tiny_run, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


def _train(corpus: Path, out: Path, steps: int, resume: bool = False, **trainer) -> None:
    settings = RunSettings.from_dict(tiny_run(corpus, steps, eval_every=4, **trainer))
    train_causal_lm(settings, str(out), resume=resume, log=lambda line: None, progress=False)


def _events(run: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_logs_what_metrics_jsonl_logs_and_a_resume_replaces_the_events_after_it(corpus, tmp_path):
    _train(corpus, tmp_path / "run", 6)
    logged = records(tmp_path / "run")
    train = [r for r in logged if "loss" in r]
    events = _events(tmp_path / "run")
    for name in ("loss", "lr", "grad_norm", "tokens_per_s"):
        assert events[f"train/{name}"] == [(r["step"], pytest.approx(r[name], rel=1e-6)) for r in train], name
    assert events["eval/val_loss"] == [(r["step"], pytest.approx(r["eval"]["val_loss"])) for r in logged if "eval" in r]
    assert all(r["grad_norm"] > 0 for r in train)
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-00000006")  # resume from step 4: 5 and 6 logged again
    time.sleep(1.1)  # TensorBoard orders event files by their names' whole-second timestamp, then a per-process
    _train(corpus, tmp_path / "run", 8, resume=True)  # counter ("...9" after "...10"): a real resume is later
    steps = [step for step, _ in _events(tmp_path / "run")["train/loss"]]
    assert sorted(steps) == list(range(1, 9))  # the first run's 5 and 6 purged


def test_wandb_gets_the_same_scalars_and_keeps_its_run_id(corpus, tmp_path, monkeypatch):
    runs = []

    class Run:
        def __init__(self, **init):
            self.init, self.logged, self.finished = init, [], False

        def log(self, values, step):
            self.logged.append((step, values))

        def finish(self):
            self.finished = True

    def init(**kwargs):
        runs.append(Run(**kwargs))
        return runs[-1]

    fake = SimpleNamespace(init=init, util=SimpleNamespace(generate_id=lambda: "abc123"))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setattr("posformer.train.trackers._installed", lambda name: name == "wandb")
    _train(corpus, tmp_path / "run", 4, wandb_project="posformer-tests", tensorboard=False)
    run = runs[0]
    assert run.finished and run.init["project"] == "posformer-tests" and run.init["id"] == "abc123"
    assert [step for step, values in run.logged if "train/loss" in values] == [1, 2, 3, 4]
    assert (tmp_path / "run" / "wandb_run_id").read_text().strip() == "abc123"
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_a_tracker_asked_for_but_missing_is_named_with_its_install(corpus, tmp_path, monkeypatch):
    """Refused with the settings, before any work: nothing is written."""
    monkeypatch.setattr("posformer.train.trackers._installed", lambda name: False)
    with pytest.raises(ImportError, match=r"trainer.wandb_project='p' needs the `wandb` package: pip install wandb"):
        _train(corpus, tmp_path / "a", 2, wandb_project="p")
    with pytest.raises(ImportError, match=r"trainer.tensorboard=true needs the `tensorboard` package"):
        _train(corpus, tmp_path / "b", 2, tensorboard=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
