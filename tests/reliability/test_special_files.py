"""A FIFO, a device or a directory given where a file is read is reported as "is not a regular file" (and what it
is), never as "does not exist", and never read (a FIFO without a writer would block the command for ever): one
check, `user_files.regular_file`, for the files a user names and for the files of a model directory."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from checkpoint_fixtures import copy, generate, refused, save_hf_llama, save_posformer

from posformer.config import Config
from posformer.data.documents import source_files
from posformer.data.squad import load_qa_file
from posformer.data.text import read_utf8
from posformer.train.settings import load_run_settings
from posformer.utils.user_files import read_json_file, regular_file


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """A named pipe; a thread opens its other end and closes it, so a reader that opens it by mistake gets an empty
    file instead of hanging the test."""
    path = tmp_path / "pipe.json"
    os.mkfifo(path)

    def unblock() -> None:
        with open(path, "w"):
            pass

    threading.Thread(target=unblock, daemon=True).start()
    return path


def test_regular_file_names_what_it_is(tmp_path: Path, fifo: Path) -> None:
    with pytest.raises(ValueError, match=r"^X is not a regular file but a FIFO \(named pipe\): expected a file$"):
        regular_file(fifo, "X")
    with pytest.raises(ValueError, match=r"^X is not a regular file but a character device: expected a file$"):
        regular_file("/dev/null", "X")
    with pytest.raises(ValueError, match=r"^X is not a regular file but a directory: expected a file$"):
        regular_file(tmp_path, "X")
    with pytest.raises(FileNotFoundError, match=r"^X does not exist$"):
        regular_file(tmp_path / "absent", "X")
    assert regular_file(tmp_path, "X", directory=True) == tmp_path
    with pytest.raises(ValueError, match=r"FIFO \(named pipe\): expected a file or a directory$"):
        regular_file(fifo, "X", directory=True)


READERS = {  # a reader of a file the user names -> what its message calls the file
    "Config.load": (lambda path: Config.load(path), "config file"),
    "read_json_file": (lambda path: read_json_file(path, "predictions file"), "predictions file"),
    "QA data file": (lambda path: load_qa_file(path), "QA data file"),
    "QA data file (JSON lines)": (lambda path: load_qa_file(path.rename(path.with_suffix(".jsonl"))), "QA data file"),
    "--context-file": (lambda path: read_utf8(path, f"--context-file {path}"), "--context-file"),
    "corpus": (lambda path: source_files(path), ""),
    "data.train": (lambda path: load_run_settings(None, [f"data.train={path}"]), "data.train:"),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("special", ["fifo", "device"])
def test_a_user_file_that_is_no_regular_file_is_named_so(tmp_path: Path, fifo: Path, reader: str, special: str) -> None:
    read, what = READERS[reader]
    path = fifo
    if special == "device":  # a link to /dev/null, with the suffix the reader wants
        path = tmp_path / "device.json"
        path.symlink_to("/dev/null")
    with pytest.raises(ValueError) as caught:
        read(path)
    said = str(caught.value)
    assert "is not a regular file but a" in said and "does not exist" not in said, said
    assert what in said and path.name.split(".")[0] in said, said


def test_the_cli_names_a_fifo_given_as_a_file(tmp_path: Path, fifo: Path) -> None:
    err = refused("info", "--config", str(fifo))
    assert f"config file {fifo} is not a regular file but a FIFO (named pipe)" in err
    err = refused("train", "--config", "/dev/null", "--output-dir", str(tmp_path / "out"))
    assert "run config /dev/null is not a regular file but a character device" in err


@pytest.mark.parametrize(
    "kind,name", [("posformer", "config.json"), ("hf", "config.json"), ("hf", "tokenizer_config.json")]
)
def test_a_fifo_in_a_model_directory_is_named_so(tmp_path: Path, fifo: Path, kind: str, name: str) -> None:
    save = save_posformer if kind == "posformer" else save_hf_llama
    model = copy(save(tmp_path / "source"), tmp_path / "model")
    (model / name).unlink()
    os.mkfifo(model / name)
    err = refused(*generate(model))
    assert f"{model / name} is not a regular file but a FIFO (named pipe): expected a file" in err
