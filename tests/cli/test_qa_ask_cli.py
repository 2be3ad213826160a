"""`posformer qa ask`: a trained tiny model (span and seq2seq) answers its questions; bad input fails clearly."""

from __future__ import annotations

import io
import json
import sys

import pytest

import posformer as pf
from posformer.checkpoints.native import save_pretrained
from posformer.cli import main
from posformer.cli.program import build_parser
from posformer.tasks.qa import pipeline
from tests.conftest import tiny
from tiny_bert import save_tiny_bert
from tiny_qa import CONTEXT, GOLD, train_tiny_qa

QUESTIONS = [flag for question in GOLD for flag in ("--question", question)]


@pytest.fixture(scope="module", params=["span", "seq2seq"])
def run(request, tmp_path_factory):
    """A `qa train` run dir of each head that knows the GOLD answers."""
    return train_tiny_qa(tmp_path_factory.mktemp(request.param), request.param)


def _ask(capsys, *args: str) -> list[str]:
    capsys.readouterr()
    assert main(["qa", "ask", *args]) == 0
    return capsys.readouterr().out.splitlines()


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def test_ask_answers_the_trained_questions(run, capsys):
    """One readable line per question: the gold answer with a positive score, or "no answer"."""
    lines = _ask(capsys, "--model", str(run), "--context", CONTEXT, *QUESTIONS)
    assert len(lines) == len(GOLD)
    for line, (question, gold) in zip(lines, GOLD.items()):
        asked, said = line.split(" -> ")
        assert asked == question
        if gold:
            assert said.startswith(f"{gold}  (score +"), line
        else:
            assert said.startswith("no answer  (score -"), line
    checkpoint = next((run / "checkpoints").iterdir())
    assert _ask(capsys, "--model", str(checkpoint), "--context", CONTEXT, *QUESTIONS) == lines


def test_the_python_pipeline_answers_as_qa_ask_does(run, capsys):
    qa = pipeline(run)
    said = [qa(question=question, context=CONTEXT).answer for question in GOLD]
    assert said == list(GOLD.values())
    records = [{"question": question, "context": CONTEXT} for question in GOLD]
    assert [a.describe() for a in qa(records)] == _ask(capsys, "--model", str(run), "--context", CONTEXT, *QUESTIONS)
    with pytest.raises(ValueError, match=r"record 1: missing field 'context'"):
        qa([{"question": "Who?"}])
    with pytest.raises(ValueError, match=r"question is empty"):
        qa(question=" ", context=CONTEXT)


def test_ask_reads_json_lines_from_stdin_and_prints_json(run, capsys, monkeypatch, tmp_path):
    records = [json.dumps({"context": CONTEXT, "question": question, "id": n}) for n, question in enumerate(GOLD)]
    _stdin(monkeypatch, records[0] + "\n\n" + "\n".join(records[1:]) + "\n   \n")
    printed = [json.loads(line) for line in _ask(capsys, "--model", str(run), "--json")]
    assert [p["question"] for p in printed] == list(GOLD)
    assert [p["answer"] for p in printed] == list(GOLD.values())
    assert [p["has_answer"] for p in printed] == [bool(gold) for gold in GOLD.values()]
    assert all((p["score"] >= p["needed"]) == p["has_answer"] for p in printed), printed
    assert all(p["best_answer"] == p["answer"] for p in printed if p["has_answer"])
    context_file = tmp_path / "context.txt"
    context_file.write_text(CONTEXT, encoding="utf-8")
    from_flags = _ask(capsys, "--model", str(run), "--context-file", str(context_file), *QUESTIONS, "--json")
    assert [json.loads(line) for line in from_flags] == printed


def test_a_question_too_long_for_a_window_names_its_source(run, capsys, monkeypatch):
    long_question = "why " * 70 + "?"
    assert (
        main(
            [
                "qa",
                "ask",
                "--model",
                str(run),
                "--context",
                CONTEXT,
                *QUESTIONS[:2],
                "--question",
                long_question,
                "--max-seq-length",
                "64",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "example --question 2: question of" in err and "must exceed doc_stride (16)" in err
    _stdin(monkeypatch, json.dumps({"context": CONTEXT, "question": long_question}) + "\n")
    assert main(["qa", "ask", "--model", str(run), "--max-seq-length", "64"]) == 2
    assert "example stdin line 1: question of" in capsys.readouterr().err


def test_prediction_flags_are_checked(run, capsys):
    assert main(["qa", "ask", "--model", str(run), "--context", CONTEXT, *QUESTIONS, "--doc-stride", "0"]) == 2
    assert "--doc-stride=0 is invalid: expected a positive integer" in capsys.readouterr().err
    assert main(["qa", "ask", "--model", str(run), "--context", CONTEXT, *QUESTIONS, "--max-seq-length", "16"]) == 2
    err = capsys.readouterr().err
    assert "--doc-stride=16 is invalid: expected an integer smaller than --max-seq-length (16)" in err


BAD_INPUT = {  # name: (flags, stdin, what the one-line error says)
    "empty-context": (["--context", "", "--question", "Who?"], "", "--context is empty (or only whitespace)"),
    "blank-context": (["--context", " \n\t", "--question", "Who?"], "", "--context is empty (or only whitespace)"),
    "empty-question": (["--context", CONTEXT, "--question", "Who?", "--question", " "], "", "--question 2 is empty"),
    "both-contexts": (
        ["--context", CONTEXT, "--context-file", "c.txt", "--question", "Who?"],
        "",
        "give either --context or --context-file, not both",
    ),
    "no-context": (
        ["--question", "Who?"],
        "",
        "--question needs a context: give --context TEXT or --context-file FILE",
    ),
    "missing-file": (
        ["--context-file", "{tmp}/missing.txt", "--question", "Who?"],
        "",
        "--context-file {tmp}/missing.txt does not exist",
    ),
    "blank-file": (
        ["--context-file", "{tmp}/blank.txt", "--question", "Who?"],
        "",
        "--context-file {tmp}/blank.txt is empty",
    ),
    "context-without-question": (["--context", CONTEXT], "", "--context / --context-file need --question"),
    "invalid-json": (
        [],
        '{"context": "a b", "question": "a?"}\n{"context": "a b", question: 1}\n',
        "stdin line 2 is not valid JSON at line 1, column 20: Expecting property name enclosed in double quotes",
    ),
    "deep-json": (
        [],
        "[" * 100_000 + "]" * 100_000 + "\n",
        "stdin line 1 is refused: it is nested too deeply",
    ),
    "no-question-field": ([], '\n{"context": "a b"}\n', "stdin line 2: missing field 'question'"),
    "no-context-field": ([], '{"question": "a?"}\n', "stdin line 1: missing field 'context'"),
    "list-context": (
        [],
        '{"context": ["a b"], "question": "a?"}\n',
        "stdin line 1: field 'context' must be a string, got list",
    ),
    "int-question": (
        [],
        '{"context": "a b", "question": 3}\n',
        "stdin line 1: field 'question' must be a string, got int",
    ),
    "blank-context-field": (
        [],
        '{"context": "  ", "question": "a?"}\n',
        "stdin line 1: field 'context' is empty (or only whitespace)",
    ),
    "not-an-object": ([], '["a b", "a?"]\n', "stdin line 1: expected a JSON object"),
    "empty-stdin": ([], "", "no questions: give --question"),
    "blank-stdin": ([], "\n  \n", "no questions: give --question"),
}


@pytest.mark.parametrize("flags, stdin, message", BAD_INPUT.values(), ids=BAD_INPUT)
def test_bad_input_is_one_clear_line_and_status_2(flags, stdin, message, tmp_path, capsys, monkeypatch):
    """Input is checked before the model is loaded: --model need not exist for these."""
    (tmp_path / "blank.txt").write_text(" \n")
    _stdin(monkeypatch, stdin)
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    assert main(["qa", "ask", "--model", str(tmp_path / "never-loaded"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("posformer qa: error: ") and err.count("\n") == 1
    assert message.replace("{tmp}", str(tmp_path)) in err


def test_models_that_cannot_answer_are_refused(tmp_path, capsys):
    causal = tmp_path / "causal"
    save_pretrained(pf.Transformer(tiny("decoder")), causal)
    (tmp_path / "empty").mkdir()
    save_tiny_bert(tmp_path / "bert")  # a BERT base: no QA head
    expected = {
        "causal": "is not a question-answering model (arch decoder, head 'causal_lm')",
        "empty": "config.json does not exist",
        "bert": "is not a question-answering model (arch encoder, head 'none')",
        "nope": f"--model {tmp_path / 'nope'} does not exist",
    }
    for name, message in expected.items():
        assert main(["qa", "ask", "--model", str(tmp_path / name), "--context", CONTEXT, *QUESTIONS]) == 2
        err = capsys.readouterr().err
        assert f"--model {tmp_path / name}" in err and message in err and err.count("\n") == 1, err


def test_help_gives_every_flag_a_default(capsys):
    """Every option of `qa ask` says its default in --help; the score is explained there."""
    qa = build_parser()._subparsers._group_actions[0].choices["qa"]
    ask = qa._subparsers._group_actions[0].choices["ask"]
    options = [a for a in ask._actions if a.option_strings and a.dest != "help"]
    assert {a.option_strings[0] for a in options} >= {
        "--model",
        "--context",
        "--context-file",
        "--question",
        "--json",
        "--max-seq-length",
        "--doc-stride",
        "--num-beams",
        "--max-answer-length",
        "--null-score-diff-threshold",
        "--n-best-size",
    }
    assert [a.option_strings[0] for a in options if "default" not in a.help and not a.required] == []
    with pytest.raises(SystemExit):
        main(["qa", "ask", "--help"])
    assert "score: how much the model prefers its best answer" in capsys.readouterr().out
