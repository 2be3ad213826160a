"""`posformer train --help` lists every setting a run config accepts (each data.* and trainer.* key that
`RunSettings.from_dict` takes), each with one line of help and its default, written as the YAML that `--set`
reads back to the same value."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from posformer.cli import main
from posformer.train.settings import DataSettings, RunSettings, TrainerSettings


@pytest.fixture(scope="module")
def train_help() -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["train", "--help"])
    return out.getvalue()


def _entry(text: str, key: str) -> str:
    """The help of `key`: its line and the lines under it, up to the next key or group."""
    found = re.search(rf"^\s+{re.escape(key)}\s+(.*?)(?=^\s+(?:data|trainer)\.\w+\s|^\S|\Z)", text, re.M | re.S)
    assert found is not None, f"{key} is not listed"
    return " ".join(found.group(1).split())


@pytest.mark.parametrize("section, settings", [("data", DataSettings), ("trainer", TrainerSettings)])
def test_every_setting_is_listed_with_help(train_help: str, section: str, settings: type) -> None:
    accepted = {f.name for f in dataclasses.fields(settings)}  # what a config's section may hold
    for name in accepted:
        entry = _entry(train_help, f"{section}.{name}")
        assert len(entry) > 10, (name, entry)


@pytest.mark.parametrize("section, settings", [("data", DataSettings), ("trainer", TrainerSettings)])
def test_a_listed_default_reads_back_as_the_default(train_help: str, section: str, settings: type) -> None:
    defaults = dataclasses.asdict(settings())
    listed = 0
    for name, value in defaults.items():
        written = re.search(r"\(default: (.*)\)$", _entry(train_help, f"{section}.{name}"))
        if written is None or written.group(1).startswith(("the ", "none", "when", "eval_every")):
            continue  # a default the help describes in words
        listed += 1
        read = yaml.safe_load(written.group(1))
        assert (list(read) if isinstance(value, tuple) else read) == (
            list(value) if isinstance(value, tuple) else value
        )
    assert listed >= len(defaults) // 2


def test_the_named_settings_of_the_issue_are_listed(train_help: str) -> None:
    for key in ("data.pack_documents", "trainer.activation_checkpointing", "trainer.tensorboard"):
        assert re.search(rf"^\s+{re.escape(key)}\s", train_help, re.M), key
    assert "model.KEY" in train_help and "model.preset=NAME" in train_help


def test_the_settings_still_refuse_bad_values_by_name() -> None:
    for override, message in (
        ("trainer.schedule=step", "trainer.schedule='step' is invalid: expected one of constant, linear, cosine"),
        ("trainer.grad_accum=0", "trainer.grad_accum=0 is invalid"),
        ("trainer.keep_last=0", "trainer.keep_last=0 is invalid"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            RunSettings.from_dict({"trainer": dict([_pair(override)])}).validate()


def _pair(override: str) -> tuple[str, object]:
    key, _, value = override.partition("=")
    return key.split(".")[1], yaml.safe_load(value)
