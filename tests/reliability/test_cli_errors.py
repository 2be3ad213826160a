"""The command line turns every user error into one line naming the field or file, exit status 2, and no traceback;
`--debug` shows the traceback; an unexpected error is reported as internal (exit 1) without one."""

from __future__ import annotations

import json

import pytest
import yaml
from checkpoint_fixtures import cli, refused

from posformer.cli import program
from posformer.data.squad import squad_sample
from train_helpers import finished_run

RUN_FILES = {  # file content -> what the error must say
    "model: {d_model: [\n": ["run.yaml is not valid YAML at line 2"],
    "model: 5\n": ["model=5 is invalid: expected a mapping"],
    "data:\n  train: [null]\n": ["data.train=[None] is invalid"],
    "[1, 2]\n": ["run.yaml: expected a mapping with sections"],
    "trainer: {betas: 0.9}\n": ["trainer.betas=0.9 is invalid"],
    "trainer: {compile: 'no'}\n": ["trainer.compile='no' is invalid: expected true or false"],
}


@pytest.mark.parametrize("content", list(RUN_FILES))
def test_broken_run_configs_name_the_file_or_the_field(tmp_path, content: str) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(content)
    err = refused("train", "--config", str(config), "--output-dir", str(tmp_path / "out"))
    assert all(words in err for words in RUN_FILES[content]), err


def test_a_binary_or_missing_config_names_the_file(tmp_path) -> None:
    binary = tmp_path / "run.yaml"
    binary.write_bytes(bytes(range(256)))
    assert f"run config {binary} is not UTF-8 text" in refused("train", "--config", str(binary))
    assert f"config file {binary} is not UTF-8 text" in refused("info", "--config", str(binary))
    assert f"run config {tmp_path} is not a regular file but a directory" in refused("train", "--config", str(tmp_path))
    assert "does not exist" in refused("info", "--config", str(tmp_path / "nope.json"))


@pytest.mark.parametrize(
    "item,words",
    [
        ("trainer.lr=[", "--set 'trainer.lr=[': the value is not valid YAML"),
        ("trainer.lr=.nan", "trainer.lr=nan is invalid"),
        ("model.tie_embeddings=maybe", "Config.tie_embeddings='maybe' is invalid: expected true or false"),
        ("model.max_positions=.nan", "Config.max_positions=nan is invalid"),
        ("trainer.betas=0", "trainer.betas=0 is invalid"),
        ("model.preset=[1]", "unknown preset [1]"),
    ],
)
def test_bad_set_values_are_named(tmp_path, item: str, words: str) -> None:
    assert words in refused("train", "--set", item, "--output-dir", str(tmp_path / "out"))


@pytest.mark.parametrize(
    "argv,words",
    [
        (["generate", "--model", "m", "--temperature", "nan"], "argument --temperature: 'nan' is not a finite number"),
        (["generate", "--model", "m", "--top-p", "0"], "argument --top-p: 0 is not a number in (0, 1]"),
        (["info", "--preset", "llama", "--context", "0"], "argument --context: 0 is not a positive integer"),
        (["bench", "--positions", "--heads", "0"], "argument --heads: 0 is not a positive integer"),
    ],
)
def test_bad_numbers_on_the_command_line_are_usage_errors(argv: list[str], words: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        program.main(argv)
    assert exit_info.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("values", [{"q1": None}, {"q1": [0.5]}, {"q1": "high"}, {"q1": float("nan")}])
def test_qa_score_refuses_no_answer_probabilities_that_are_not_numbers(tmp_path, values: dict) -> None:
    (tmp_path / "pred.json").write_text(json.dumps({"q1": ""}))
    (tmp_path / "na.json").write_text(json.dumps(values))
    err = refused(
        "qa",
        "score",
        "--eval-file",
        str(squad_sample()),
        "--predictions",
        str(tmp_path / "pred.json"),
        "--na-probs",
        str(tmp_path / "na.json"),
    )
    assert f"no-answer probabilities file {tmp_path / 'na.json'}" in err and "not finite numbers" in err


def test_output_paths_that_are_files_fail_before_any_work(tmp_path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("a file")
    assert f"output dir {taken} is not writable" in refused("train", "--output-dir", str(taken))
    # checked before the model is even looked for: no evaluation runs only to fail at the end
    assert f"output dir {taken} is not writable" in refused(
        "qa", "eval", "--model", str(tmp_path / "none"), "--output-dir", str(taken)
    )
    assert f"--out-file {tmp_path} is a directory" in refused(
        "qa", "score", "--eval-file", str(squad_sample()), "--predictions", str(taken), "--out-file", str(tmp_path)
    )


def test_debug_shows_the_traceback_and_internal_errors_say_so(tmp_path, monkeypatch) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("model: 5\n")
    with pytest.raises(ValueError, match="model=5 is invalid"):
        program.main(["train", "--config", str(config), "--debug"])

    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(program, "parse", lambda argv: program.argparse.Namespace(command="info", run=broken))
    status, _, err = cli("info", "--preset", "llama")
    assert status == 1 and "posformer info: internal error (KeyError)" in err and "--debug" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", bytes(range(256))])
def test_damaged_results_files_are_named(tmp_path, content: bytes) -> None:
    """`plot --results` and a rerun of `extrapolate` into an output dir whose results.json is damaged."""
    (tmp_path / "results.json").write_bytes(content)
    assert str(tmp_path / "results.json") in refused(
        "plot", "--output-dir", str(tmp_path / "figs"), "--results", str(tmp_path)
    )
    assert str(tmp_path / "results.json") in refused(
        "extrapolate", "--preset", "quick", "--output-dir", str(tmp_path), "--no-progress"
    )


def test_a_damaged_run_config_does_not_stop_a_resume(tmp_path, capsys) -> None:
    """run_config.yaml is a record of the run (each checkpoint keeps its own copy), rewritten on resume."""
    config, run = finished_run(tmp_path, 4)
    (run / "run_config.yaml").write_bytes(b"model: {d_model: [\n")
    status, out, err = cli(
        "train",
        "--config",
        str(config),
        "--output-dir",
        str(run),
        "--resume",
        "--set",
        "trainer.steps=6",
        "--no-progress",
    )
    assert status == 0, err
    assert yaml.safe_load((run / "run_config.yaml").read_text())["trainer"]["steps"] == 6


def test_a_window_longer_than_the_position_table_is_refused_before_training(tmp_path) -> None:
    from tiny_bert import save_tiny_bert

    model = save_tiny_bert(tmp_path / "bert", max_position_embeddings=64)
    err = refused(
        "qa",
        "train",
        "--head",
        "span",
        "--model",
        str(model),
        "--max-seq-length",
        "96",
        "--doc-stride",
        "32",
        "--max-steps",
        "1",
        "--output-dir",
        str(tmp_path / "run"),
        "--no-progress",
    )
    assert "--max-seq-length=96 is invalid: expected at most 64" in err
    assert not (tmp_path / "run" / "checkpoints").exists()
