"""A lone surrogate (`"\\ud800"` in JSON or YAML, bytes that are not UTF-8 on the command line) is no text a
tokenizer takes: wherever it comes in (a SQuAD file, `qa ask` JSON lines on stdin, a run config, a flag's value) it
is a clear error naming the file or flag and the field, never `internal error (TypeError)` from the tokenizer."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from checkpoint_fixtures import cli, refused, save_hf_llama

from posformer.data.squad import QADataError, QAExample, load_qa_file
from posformer.utils.unicode_text import check_texts
from posformer.utils.user_files import parse_json, parse_yaml
from tiny_bert import save_tiny_bert
from tiny_qa import CONTEXT, GOLD

QUESTION = {"id": "q1", "question": "Who \ud800?", "answers": [], "is_impossible": True}
SQUAD = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": [QUESTION]}]}]}


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A span QA run dir (two training steps: enough to load and answer)."""
    from posformer.tasks.qa.job import train_qa
    from posformer.tasks.qa.options import QAJobOptions

    root = tmp_path_factory.mktemp("qa")
    data = root / "data.jsonl"
    rows = [
        {"id": str(n), "context": CONTEXT, "question": q, "answers": {"text": [], "answer_start": []}}
        for n, q in enumerate(GOLD)
    ]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    save_tiny_bert(root / "bert")
    options = QAJobOptions(
        head="span",
        model=str(root / "bert"),
        train_file=str(data),
        eval_file=str(data),
        output_dir=str(root / "run"),
        per_device_train_batch_size=2,
        max_steps=2,
        max_seq_length=64,
        doc_stride=16,
        progress=False,
    )
    train_qa(options, log=lambda _: None)
    return root / "run"


def test_a_squad_file_names_the_file_and_field(qa_run: Path, tmp_path: Path) -> None:
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(SQUAD))  # json.dumps writes the lone surrogate as the escape \ud800
    field = "data[0].paragraphs[0].qas[0].question holds a lone surrogate (\\ud800)"
    with pytest.raises(QADataError) as caught:
        load_qa_file(path)
    assert f"{path}: {field}" in str(caught.value)
    err = refused("qa", "eval", "--model", str(qa_run), "--eval-file", str(path), "--output-dir", str(tmp_path / "e"))
    assert f"QA data file {path}: {field}" in err


@pytest.mark.parametrize(
    "record", [{"context": CONTEXT, "question": "Who \ud800?"}, {"context": "\udfff" + CONTEXT, "question": "Who?"}]
)
def test_qa_ask_json_lines_name_the_line_and_field(qa_run: Path, monkeypatch, record: dict) -> None:
    monkeypatch.setattr(
        sys,
        "stdin",
        io.StringIO(json.dumps({"question": "Who?", "context": CONTEXT}) + "\n" + json.dumps(record) + "\n"),
    )
    err = refused("qa", "ask", "--model", str(qa_run), "--json")
    field = "question" if "\ud800" in record["question"] else "context"
    assert f"stdin line 2: {field} holds a lone surrogate" in err


def test_a_qa_example_refuses_a_lone_surrogate() -> None:
    with pytest.raises(ValueError, match=r"QA example 'x': context holds a lone surrogate \(\\udc80\)"):
        QAExample("x", "", "a\udc80b", "Who?")
    assert QAExample("x", "", "emoji \U0001f600 fine", "Who?").context.startswith("emoji")


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--prompt", "a\udcffb"], "--prompt"),
        (["--prompt=a\udcffb"], "--prompt"),
    ],
)
def test_a_flag_value_that_is_not_utf8_names_the_flag(tmp_path: Path, argv: list[str], flag: str) -> None:
    model = save_hf_llama(tmp_path / "model")
    status, _, err = cli("generate", "--model", str(model), *argv, "--max-new-tokens", "1")
    assert status == 2 and err.startswith(f"posformer: error: the value of {flag} 'a\\udcffb' is not UTF-8 text"), err
    status, _, err = cli("qa", "ask", "--model", str(model), "--context", "x", "--question", "Who\udcff?")
    assert status == 2 and "the value of --question 'Who\\udcff?' is not UTF-8 text" in err, err


def test_json_and_yaml_name_the_place_of_a_lone_surrogate(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^f.json: a\[1\].b holds a lone surrogate \(\\ud800\)"):
        parse_json('{"a": [1, {"b": "\\ud800"}]}', "f.json")
    with pytest.raises(ValueError, match=r"^f.json: a key of a holds a lone surrogate"):
        parse_json('{"a": {"\\udfff": 1}}', "f.json")
    with pytest.raises(ValueError, match=r"^run config r.yaml: trainer.sample_prompt holds a lone surrogate"):
        parse_yaml('trainer: {sample_prompt: "x\\ud800"}', "run config r.yaml")
    assert parse_json('{"a": "\\ud83d\\ude00"}', "f.json") == {"a": "\U0001f600"}  # a pair is one character
    run = tmp_path / "run.yaml"
    run.write_text('model: {preset: llama}\ntrainer: {sample_prompt: "x\\ud800"}\n')
    err = refused("train", "--config", str(run), "--output-dir", str(tmp_path / "out"))
    assert f"run config {run}: trainer.sample_prompt holds a lone surrogate (\\ud800)" in err


def test_check_texts_skips_text_without_escapes() -> None:
    check_texts({"a": "\ud800"}, "f", source='{"a": "plain"}')  # the source holds no escape: nothing looked at
    with pytest.raises(ValueError, match="f: a holds"):
        check_texts({"a": "\ud800"}, "f", source='{"a": "\\ud800"}')
