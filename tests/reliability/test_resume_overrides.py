"""Overrides on --resume are applied and recorded, or refused by name: never ignored while run_config.yaml
records them (`posformer.train.resume_check`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from posformer.cli import main
from posformer.train.run_lock import LOCK_FILE
from train_helpers import finished_run, losses

STEPS = 20  # checkpoints at 10 and 20
TINY_T5 = ["--from-scratch", "--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "64", "--vocab-size", "300"]
QA = [
    *TINY_T5,
    "--max-seq-length",
    "96",
    "--doc-stride",
    "32",
    "--max-train-samples",
    "12",
    "--max-eval-samples",
    "3",
    "--save-steps",
    "2",
    "--warmup-ratio",
    "0.25",
    "--no-progress",
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return finished_run(tmp_path_factory.mktemp("overrides"), STEPS)


def _files(run: Path) -> dict[Path, bytes]:
    """Every file of the run but its lock file, which names the command holding it (this test's latest)."""
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK_FILE}


@pytest.mark.parametrize(
    "override, name, old, new",
    [
        ("trainer.lr=1e-5", "trainer.lr", "0.01", "1e-05"),
        ("trainer.warmup=2", "trainer.warmup", "5", "2"),
        (
            "trainer.batch_size=4",
            "batch of an optimizer step (trainer.batch_size x trainer.grad_accum x processes)",
            "8",
            "4",
        ),
        (
            "trainer.grad_accum=2",
            "batch of an optimizer step (trainer.batch_size x trainer.grad_accum x processes)",
            "8",
            "16",
        ),
        ("trainer.weight_decay=0.0", "trainer.weight_decay", "0.1", "0.0"),
        ("trainer.schedule=linear", "trainer.schedule", '"cosine"', '"linear"'),
        ("trainer.seed=3", "trainer.seed", "0", "3"),
        ("data.seq_len=16", "data.seq_len", "32", "16"),
    ],
)
def test_a_setting_the_checkpoint_fixes_is_refused_by_name(
    finished: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    override: str,
    name: str,
    old: str,
    new: str,
) -> None:
    config, run = finished
    out = shutil.copytree(run, tmp_path / "run")
    before = _files(out)
    assert (
        main(
            ["train", "--config", str(config), "--output-dir", str(out), "--resume", "--set", override, "--no-progress"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{name}: {old} in the checkpoint, {new} now" in err and "another output dir" in err
    assert _files(out) == before  # run_config.yaml still records what the checkpoint was trained with


def test_the_batch_may_be_split_differently_on_resume(
    finished: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """batch 8 = 4 x 2 micro-batches: the same windows per step, so the data position still means the same."""
    config, run = finished
    out = shutil.copytree(run, tmp_path / "run")
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--output-dir",
                str(out),
                "--resume",
                "--set",
                "trainer.steps=22",
                "--set",
                "trainer.batch_size=4",
                "--set",
                "trainer.grad_accum=2",
                "--no-progress",
            ]
        )
        == 0
    )
    recorded = yaml.safe_load((out / "run_config.yaml").read_text())["trainer"]
    assert (recorded["batch_size"], recorded["grad_accum"]) == (4, 2)
    assert [s for s, _ in losses(out)] == list(range(1, 23))


def test_settings_that_apply_on_resume_are_applied_and_recorded(
    finished: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    config, run = finished
    out = shutil.copytree(run, tmp_path / "run")
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--output-dir",
                str(out),
                "--resume",
                "--set",
                "trainer.steps=26",
                "--set",
                "trainer.eval_every=3",
                "--set",
                "trainer.keep_last=1",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "trainer.steps changed from 20 to 26 (applied)" in capsys.readouterr().out
    recorded = yaml.safe_load((out / "run_config.yaml").read_text())["trainer"]
    assert (recorded["steps"], recorded["eval_every"], recorded["keep_last"]) == (26, 3, 1)
    assert [s for s, _ in losses(out)] == list(range(1, 27))
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000026"]  # keep_last=1 applied


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("qa") / "run"
    assert main(["qa", "train", "--output-dir", str(run), *QA, "--max-steps", "4"]) == 0
    return run


@pytest.mark.parametrize(
    "flag, value, old",
    [
        ("--learning-rate", "0.01", "0.001"),
        ("--vocab-size", "200", "300"),
        ("--seed", "1", "42"),
        ("--tokenizer", "bpe", '"unigram"'),
    ],
)
def test_qa_resume_refuses_a_changed_option_by_its_flag(
    qa_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, flag: str, value: str, old: str
) -> None:
    out = shutil.copytree(qa_run, tmp_path / "run")
    before = _files(out)
    assert main(["qa", "train", "--output-dir", str(out), *QA, "--max-steps", "4", flag, value, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{flag}: {old} in the checkpoint" in err
    assert _files(out) == before


def test_qa_resume_applies_more_steps_and_keeps_the_warm_up(qa_run: Path, tmp_path: Path) -> None:
    out = shutil.copytree(qa_run, tmp_path / "run")
    assert main(["qa", "train", "--output-dir", str(out), *QA, "--max-steps", "8", "--resume"]) == 0
    recorded = yaml.safe_load((out / "run_config.yaml").read_text())["qa"]
    assert (recorded["max_steps"], recorded["steps"], recorded["warmup_steps"]) == (8, 8, 1)  # 0.25 x 4, kept
    steps = [
        json.loads(line)["step"]
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if "loss" in json.loads(line)
    ]
    assert steps == list(range(1, 9))
