"""`posformer.tasks.qa.ask`: questions from flags and JSON lines, answers and their scores, checks before loading."""

from __future__ import annotations

import io
import math

import pytest

from posformer.tasks.qa import ask as qa_ask
from posformer.tasks.qa.ask import Answer, Question, ask, questions_from_flags, questions_from_lines, read_questions
from posformer.tasks.qa.options import QAJobOptions
from posformer.tasks.qa.predictor import QAPredictions
from posformer.utils.file_limits import FileTooLarge, SizeLimit


def test_json_lines_keep_order_skip_blank_lines_and_name_their_line():
    lines = [
        "\n",
        '{"context": " Ada wrote it. ", "question": "Who?", "id": 7}\n',
        "  \n",
        '{"question": "What?", "context": "Notes."}',
    ]
    assert questions_from_lines(lines, name="asks.jsonl") == [
        Question(" Ada wrote it. ", "Who?", "asks.jsonl line 2"),
        Question("Notes.", "What?", "asks.jsonl line 4"),
    ]


def test_flags_give_each_question_the_one_context(tmp_path):
    assert questions_from_flags(" Ada wrote it.", None, ["Who?", "What?"]) == [
        Question(" Ada wrote it.", "Who?", "--question 1"),
        Question(" Ada wrote it.", "What?", "--question 2"),
    ]
    path = tmp_path / "context.txt"
    path.write_text("Zoë wrote it.\n", encoding="utf-8")
    assert questions_from_flags(None, str(path), ["Who?"]) == [Question("Zoë wrote it.\n", "Who?", "--question 1")]
    path.write_bytes(b"Zo\xeb wrote it.")
    with pytest.raises(
        ValueError, match=r"^--context-file .*context.txt is not valid UTF-8: .* invalid continuation byte$"
    ):
        questions_from_flags(None, str(path), ["Who?"])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_stdin_is_refused_rather_than_waited_on():
    with pytest.raises(ValueError, match=r"^no --question given and stdin is a terminal"):
        read_questions(None, None, [], _Terminal())
    assert read_questions(None, None, [], io.StringIO('{"context": "c", "question": "q"}\n')) == [
        Question("c", "q", "stdin line 1")
    ]


def test_questions_are_checked_before_the_model_is_loaded(tmp_path):
    never = tmp_path / "never-loaded"
    with pytest.raises(ValueError, match=r"^no questions: give --question"):
        ask(never, [])
    twice = [Question("c", "q", "here"), Question("c", "r", "here")]
    with pytest.raises(ValueError, match=r"^the sources of the questions must be unique, got \['here', 'here'\]$"):
        ask(never, twice)


class _Predictor:
    """Stands in for the head's predictor: fixed predictions for the ids it is given."""

    def __init__(self, examples, by_question: dict[str, tuple[str, float, str]]) -> None:
        self.examples = examples
        rows = {e.id: by_question[e.question] for e in examples}
        self.predictions = QAPredictions(
            {i: r[0] for i, r in rows.items()}, {i: r[1] for i, r in rows.items()}, {i: r[2] for i, r in rows.items()}
        )

    def predict(self, model) -> QAPredictions:
        return self.predictions


def test_answers_follow_the_predictor_in_question_order(monkeypatch):
    """answer: the prediction ("" for none), best: the best non-empty answer, score: the negated null odds."""
    by_question = {"Who?": ("Ada", -2.5, "Ada"), "When?": ("", 1.25, "1843"), "Where?": ("", math.inf, "")}
    calls = []

    def predictor(head, tokenizer, examples, options):
        calls.append((head, [(e.id, e.context, e.question) for e in examples]))
        return _Predictor(examples, by_question)

    monkeypatch.setattr(qa_ask, "qa_predictor", predictor)
    questions = questions_from_flags("Ada wrote it in 1843.", None, list(by_question))
    answers = qa_ask.answer(None, None, "span", questions, QAJobOptions(null_score_diff_threshold=0.5))
    assert calls == [
        ("span", [(f"--question {n}", "Ada wrote it in 1843.", q) for n, q in enumerate(by_question, start=1)])
    ]
    assert answers == [
        Answer("Who?", "Ada", "Ada", 2.5, -0.5),
        Answer("When?", "", "1843", -1.25, -0.5),
        Answer("Where?", "", "", -math.inf, -0.5),
    ]  # span: "" when null odds > 0.5
    assert [a.to_json() for a in answers] == [
        {"question": "Who?", "answer": "Ada", "has_answer": True, "score": 2.5, "needed": -0.5, "best_answer": "Ada"},
        {"question": "When?", "answer": "", "has_answer": False, "score": -1.25, "needed": -0.5, "best_answer": "1843"},
        {"question": "Where?", "answer": "", "has_answer": False, "score": None, "needed": -0.5, "best_answer": ""},
    ]
    assert [a.describe() for a in answers] == [
        "Who? -> Ada  (score +2.50, needs -0.50)",
        'When? -> no answer  (score -1.25, needs -0.50; best candidate: "1843")',
        "Where? -> no answer  (no candidate answer)",
    ]


def test_a_stdin_line_over_its_limit_is_refused_naming_the_line_before_it_is_held_whole() -> None:
    """`qa ask` reads stdin one bounded line at a time: a huge line is refused by number, not read whole."""
    stream = io.StringIO('{"context": "c", "question": "q"}\n' + "x" * 100 + "\n")
    lines = qa_ask.bounded_lines(stream, "stdin", SizeLimit(40, "a test line"))
    assert next(lines).startswith('{"context"')
    with pytest.raises(FileTooLarge, match=r"^stdin: line 2 is too large: over the 0 MiB limit of a test line$"):
        next(lines)
    assert stream.tell() <= len('{"context": "c", "question": "q"}\n') + 41
