"""A panic in a Rust library (pyo3 raises it as `PanicException`, a `BaseException`, not an `Exception`) is one
line from the CLI naming the tokenizer and its model directory, exit status 2; `--debug` still shows it, and the
other `BaseException`s (KeyboardInterrupt, SystemExit) keep their meaning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_fixtures import cli, save_hf_llama

import posformer.loading
from posformer.cli import main
from posformer.cli.failures import is_rust_panic

CATASTROPHIC = {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": False}


@pytest.fixture(scope="module")
def panicking_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model whose tokenizer.json splits on a regular expression that backtracks without end on "aaa...a!"."""
    model = save_hf_llama(tmp_path_factory.mktemp("panic") / "model")
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"] = CATASTROPHIC
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    return model


def generate_on(model: Path, prompt: str) -> list[str]:
    return ["generate", "--model", str(model), "--prompt", prompt, "--max-new-tokens", "1", "--temperature", "0"]


def test_a_tokenizer_panic_is_one_line_naming_the_tokenizer(panicking_model: Path) -> None:
    status, _, err = cli(*generate_on(panicking_model, "a" * 40 + "!"))
    assert status == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(
        f"posformer generate: error: the tokenizer (the Rust `tokenizers` library) of {panicking_model}"
    )
    assert "retry-limit-in-match over" in err and "(a panic in its Rust code" in err


def test_the_same_tokenizer_works_on_input_it_can_handle(panicking_model: Path) -> None:
    status, _, err = cli(*generate_on(panicking_model, "the cat"))
    assert status == 0, err


def test_debug_shows_the_panic_itself(panicking_model: Path) -> None:
    with pytest.raises(BaseException) as caught:
        main(["--debug", *generate_on(panicking_model, "a" * 40 + "!")])
    assert is_rust_panic(caught.value)


class PanicException(BaseException):
    """What pyo3 raises, as far as `is_rust_panic` looks."""


PanicException.__module__ = "pyo3_runtime"


def raising(err: BaseException):
    def load(*_args, **_kwargs):
        raise err

    return load


def test_a_panic_of_another_rust_library_is_one_line_too(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(posformer.loading, "load_model", raising(PanicException("called `Option::unwrap()` on None")))
    status, _, err = cli(*generate_on(tmp_path, "x"))
    assert status == 2 and err.startswith("posformer generate: error: a Rust library failed: called `Option::unwrap()`")


@pytest.mark.parametrize("err,status", [(KeyboardInterrupt(), 130), (SystemExit(3), None), (GeneratorExit(), None)])
def test_other_base_exceptions_keep_their_meaning(monkeypatch, tmp_path: Path, err: BaseException, status) -> None:
    monkeypatch.setattr(posformer.loading, "load_model", raising(err))
    if status is not None:
        assert cli(*generate_on(tmp_path, "x"))[0] == status
        return
    with pytest.raises(type(err)):
        cli(*generate_on(tmp_path, "x"))
    assert not is_rust_panic(err)
