"""One reader for the JSON of user files (`user_files.parse_json`): text that is not JSON, JSON nested 100,000 deep
and an integer of 5,000 digits are each a `ValueError` that names the file (or line) and says what is wrong, never
Python's own RecursionError or "Exceeds the limit ... for integer string conversion" without the file; whichever
command or loader reads the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_fixtures import copy, generate, refused, save_hf_llama, save_posformer

from posformer.checkpoints.manifest import CorruptCheckpoint, verify
from posformer.checkpoints.model_dir import read_json
from posformer.config import Config
from posformer.data.documents import jsonl_documents
from posformer.data.squad import QADataError, load_qa_file
from posformer.loading import load_model
from posformer.utils.user_files import parse_json, read_json_file

DEEP_LIST = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a": ' * 100_000 + "1" + "}" * 100_000
BIG_INT = '{"d_model": ' + "7" * 5000 + "}"
HOSTILE = {  # case -> (text, message after the file's name)
    "deep list": (DEEP_LIST, "is refused: it is nested too deeply"),
    "deep object": (DEEP_OBJECT, "is refused: it is nested too deeply"),
    "big int": (BIG_INT, "is refused: it holds an integer of more than 4300 digits"),
    "not JSON": ('{"a": ', "is not valid JSON at line 1, column 7"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("json-models")
    return {"posformer": save_posformer(root / "posformer"), "hf": save_hf_llama(root / "hf")}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_parse_json_names_where_and_what(case: str) -> None:
    text, message = HOSTILE[case]
    with pytest.raises(ValueError) as caught:
        parse_json(text, "stdin line 3")
    assert str(caught.value).startswith(f"stdin line 3 {message}")
    assert len(str(caught.value)) < 300


def test_ordinary_json_still_reads() -> None:
    assert parse_json('{"a": [1, 2.5, "x\\u00e9", null], "big": ' + "9" * 4000 + "}", "f")["a"] == [1, 2.5, "xé", None]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


READERS = {  # what reads a user's JSON file -> a call that reads `path`
    "Config.load": lambda path: Config.load(path),
    "read_json_file": lambda path: read_json_file(path, "predictions file"),
    "QA data file": lambda path: load_qa_file(path),
    "QA data file (JSON lines)": lambda path: load_qa_file(path.rename(path.with_suffix(".jsonl"))),
    "JSON-lines corpus": lambda path: list(jsonl_documents(path.rename(path.with_suffix(".jsonl")))),
    "model_dir.read_json": lambda path: read_json(path.parent, path.name),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_reader_names_the_file(tmp_path: Path, reader: str, case: str) -> None:
    text, message = HOSTILE[case]
    path = write(tmp_path / "user.json", text)
    with pytest.raises(ValueError) as caught:
        READERS[reader](path)
    said = str(caught.value)  # the file (.json or .jsonl, with its line for JSON lines), then what is wrong
    assert str(tmp_path / "user.json") in said, said
    assert message.split(" at line")[0] in said, said


def test_a_qa_file_error_stays_a_qa_data_error(tmp_path: Path) -> None:
    with pytest.raises(QADataError, match=r"dev.json is refused: it is nested too deeply"):
        load_qa_file(write(tmp_path / "dev.json", DEEP_LIST))
    with pytest.raises(QADataError, match=r"dev.jsonl: line 2 \(record 1\) is refused: it holds an integer"):
        load_qa_file(write(tmp_path / "dev.jsonl", '{"id": "a"}\n' + BIG_INT + "\n"))


@pytest.mark.parametrize("case", ["deep list", "big int"])
@pytest.mark.parametrize(
    "kind,name", [("posformer", "config.json"), ("hf", "config.json"), ("hf", "tokenizer_config.json")]
)
def test_generate_names_the_model_file(models, tmp_path: Path, case: str, kind: str, name: str) -> None:
    model = copy(models[kind], tmp_path / "model")
    write(model / name, HOSTILE[case][0])
    err = refused(*generate(model))
    assert f"{model / name} {HOSTILE[case][1]}" in err
    if name == "config.json":
        with pytest.raises(ValueError, match=f"{name} is refused"):
            load_model(model)


def test_a_manifest_nested_too_deeply_is_a_corrupt_checkpoint(models, tmp_path: Path) -> None:
    model = copy(models["posformer"], tmp_path / "model")
    write(model / "manifest.json", DEEP_OBJECT)
    with pytest.raises(CorruptCheckpoint, match=r"manifest.json is unreadable: .*nested too deeply"):
        verify(model)


def test_the_cli_names_a_run_or_config_file(tmp_path: Path) -> None:
    config = write(tmp_path / "config.json", BIG_INT)
    assert f"config file {config} is refused: it holds an integer" in refused("info", "--config", str(config))
    run = write(tmp_path / "run.json", json.dumps({"model": {"preset": "llama"}})[:-1] + ', "x": ' + DEEP_LIST + "}")
    err = refused("train", "--config", str(run), "--output-dir", str(tmp_path / "out"))
    assert f"run config {run} is refused: it is nested too deeply" in err
    run.write_text('{"trainer": {"steps": ' + "7" * 5000 + "}}")
    err = refused("train", "--config", str(run), "--output-dir", str(tmp_path / "out"))
    assert f"run config {run} is refused: it holds an integer of more than 4300 digits" in err
