"""Ask a trained question-answering model about a text: the library side of `posformer qa ask`.

    questions = questions_from_flags(context="Paris is the capital of France.", context_file=None,
                                     questions=["What is the capital of France?"])
    for a in ask("runs/qa", questions):           # a `qa train` run dir, a checkpoint or a model dir
        print(a.describe())                       # What is the capital of France? -> Paris  (score +7.31, needs +0.00)

Long contexts go through the doc_stride windows of evaluation: the head's predictor
(`job.qa_predictor`, span or seq2seq) answers every question at once, and the prediction
options left unset take the training run's (`job.prediction_options`), as `qa eval` does.

The score of an answer is its margin over "no answer", the negated null odds of null_odds.json:
span: the best span's start + end logits minus the [CLS] (null) logits, the smallest over the
windows; seq2seq: log p(best answer) minus log p("") of the best "" window. Both are log-odds
of the answer against no answer: above 0 the model prefers its answer. Whether it is given
follows --null-score-diff-threshold (at 0, answered when the score is >= 0 for span, > 0 for
seq2seq); -inf when the model found no candidate answer at all.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, TextIO

from torch import nn

from posformer.data.squad import QAExample
from posformer.data.text import read_utf8
from posformer.model import Transformer
from posformer.tasks.qa.job import prediction_options, qa_predictor
from posformer.tasks.qa.models import load_qa_model
from posformer.tasks.qa.options import QAJobOptions
from posformer.utils.file_limits import LINE, FileTooLarge, MiB, SizeLimit
from posformer.utils.user_files import parse_json

FIELDS = ("context", "question")


@dataclass(frozen=True)
class Question:
    """One question on one context; `source` names where it came from ("--question 2", "stdin line 3")
    in errors, and must be unique among the questions asked together."""

    context: str
    question: str
    source: str


@dataclass(frozen=True)
class Answer:
    """The model's answer to one question.

    answer: the answer text, "" when the model answers that there is none.
    best: the best non-empty candidate whatever the no-answer score ("" when there is none).
    score: the best candidate's margin over "no answer" (see the module doc); -inf without a candidate.
    needed: the score an answer must reach to be given (from --null-score-diff-threshold: its negation
      for span, where a score equal to it answers; the threshold itself for seq2seq, where it must be beaten).
    """

    question: str
    answer: str
    best: str
    score: float
    needed: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """{"question", "answer" ("" for none), "has_answer", "score" (null when infinite), "best_answer"}."""
        return {
            "question": self.question,
            "answer": self.answer,
            "has_answer": bool(self.answer),
            "score": self.score if math.isfinite(self.score) else None,
            "needed": self.needed,
            "best_answer": self.best,
        }

    def describe(self) -> str:
        """One human-readable line: the question, the answer or that there is none, and the score."""
        if self.answer:
            return f"{self.question} -> {self.answer}  (score {self.score:+.2f}, needs {self.needed:+.2f})"
        if not self.best:
            return f"{self.question} -> no answer  (no candidate answer)"
        best = json.dumps(self.best, ensure_ascii=False)
        return (
            f"{self.question} -> no answer  (score {self.score:+.2f}, needs {self.needed:+.2f}; best candidate: {best})"
        )


def _text(where: str, value: str, expected: str) -> str:
    if not value.strip():
        raise ValueError(f"{where} is empty (or only whitespace): expected {expected}")
    return value


def read_context(context: str | None, context_file: str | None) -> str:
    """The context of --context TEXT or --context-file FILE (UTF-8), exactly one of them, not blank."""
    if context is not None and context_file is not None:
        raise ValueError("give either --context or --context-file, not both")
    if context is None and context_file is None:
        raise ValueError("--question needs a context: give --context TEXT or --context-file FILE")
    if context is not None:
        return _text("--context", context, "the text to answer from")
    name = f"--context-file {context_file}"
    return _text(name, read_utf8(context_file, name), "the text to answer from")


def questions_from_flags(context: str | None, context_file: str | None, questions: Sequence[str]) -> list[Question]:
    """Each --question on the one context of --context / --context-file."""
    text = read_context(context, context_file)
    return [
        Question(text, _text(f"--question {n}", q, "a question"), f"--question {n}")
        for n, q in enumerate(questions, start=1)
    ]


def _field(where: str, record: Any, name: str) -> str:
    if not isinstance(record, dict):
        raise ValueError(
            f'{where}: expected a JSON object {{"context": ..., "question": ...}}, got {type(record).__name__}'
        )
    if name not in record:
        raise ValueError(
            f"{where}: missing field {name!r}: expected a JSON object with string fields "
            f"{' and '.join(map(repr, FIELDS))}"
        )
    value = record[name]
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {name!r} must be a string, got {type(value).__name__}")
    return _text(f"{where}: field {name!r}", value, "a non-empty string")


def questions_from_lines(lines: Iterable[str], name: str = "stdin") -> list[Question]:
    """One question per JSON line {"context": ..., "question": ...} (other fields ignored; blank lines skipped)."""
    questions = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        record = parse_json(line, where)
        context, question = (_field(where, record, f) for f in FIELDS)
        questions.append(Question(context, question, where))
    return questions


def read_questions(
    context: str | None, context_file: str | None, questions: Sequence[str], stdin: TextIO
) -> list[Question]:
    """The questions of a `qa ask` command line: each --question on --context / --context-file or, with no
    --question, the JSON lines of `stdin` (refused when it is a terminal, rather than waiting on it)."""
    if questions:
        return questions_from_flags(context, context_file, questions)
    if context is not None or context_file is not None:
        raise ValueError(
            "--context / --context-file need --question (without --question, JSON lines "
            '{"context": ..., "question": ...} are read from stdin)'
        )
    if stdin.isatty():
        raise ValueError(
            "no --question given and stdin is a terminal: give --question with --context or "
            '--context-file, or pipe JSON lines {"context": ..., "question": ...} to stdin'
        )
    return questions_from_lines(bounded_lines(stdin, "stdin"))


def bounded_lines(stream: TextIO, name: str, limit: SizeLimit = LINE) -> Iterator[str]:
    """The lines of `stream`, each read with a bound: a line longer than `limit` characters is a `FileTooLarge`
    naming `name` and the line, raised before more of it is held."""
    number = 0
    while line := stream.readline(limit.bytes + 1):
        number += 1
        if len(line.rstrip("\r\n")) > limit.bytes:
            raise FileTooLarge(
                f"{name}: line {number} is too large: over the {limit.bytes // MiB:,} MiB limit of {limit.kind}"
            )
        yield line


def _examples(questions: Sequence[Question]) -> list[QAExample]:
    if not questions:
        raise ValueError(
            "no questions: give --question with --context or --context-file, or JSON lines "
            '{"context": ..., "question": ...} on stdin'
        )
    sources = [q.source for q in questions]
    if len(set(sources)) != len(sources):
        raise ValueError(f"the sources of the questions must be unique, got {sources}")
    return [QAExample(id=q.source, title="", context=q.context, question=q.question) for q in questions]


def answer(
    model: nn.Module, tokenizer, head: str, questions: Sequence[Question], options: QAJobOptions
) -> list[Answer]:
    """Answers of a loaded QA `model` ("span" or "seq2seq" `head`) with resolved `options`, in order."""
    examples = _examples(questions)
    predictions, null_odds, answers = qa_predictor(head, tokenizer, examples, options).predict(model)
    threshold = options.null_score_diff_threshold
    needed = (-threshold if head == "span" else threshold) + 0.0  # + 0.0: a threshold of 0 needs +0, not -0
    return [
        Answer(q.question, predictions[e.id], answers[e.id], -null_odds[e.id], needed)
        for q, e in zip(questions, examples)
    ]


def load_answering_model(
    path: str | Path, options: QAJobOptions | None = None
) -> tuple[Transformer, Any, str, QAJobOptions]:
    """(model, tokenizer, head, options) for `path` (see `models.load_qa_model`), the prediction options left
    unset taken from its training run; errors name --model."""
    try:
        model, tokenizer, head, directory = load_qa_model(path, None)
    except (ValueError, FileNotFoundError) as err:
        message = str(err)
        raise ValueError(message if message.startswith("--model") else f"--model {path}: {message}") from None
    return model, tokenizer, head, prediction_options(options or QAJobOptions(), directory, head)


class QuestionAnswerer:
    """A QA model loaded once, answering as Hugging Face's `pipeline("question-answering")` is called:

        qa = QuestionAnswerer("runs/qa")
        qa(question="What is the capital of France?", context="Paris is the capital of France.").answer
        qa([{"question": ..., "context": ...}, ...])       # a list of `Answer`s, in order

    `path`: a `qa train` run, a checkpoint or a model dir; `options`: the prediction options (`QAJobOptions`),
    those left unset taken from the training run.
    """

    def __init__(self, path: str | Path, options: QAJobOptions | None = None) -> None:
        self.model, self.tokenizer, self.head, self.options = load_answering_model(path, options)

    def ask(self, questions: Sequence[Question]) -> list[Answer]:
        """The answers to `questions`, in order."""
        return answer(self.model, self.tokenizer, self.head, questions, self.options)

    def __call__(
        self,
        records: Sequence[dict[str, str]] | None = None,
        question: str | None = None,
        context: str | None = None,
    ) -> Answer | list[Answer]:
        """One `Answer` for question= and context=, or a list for records [{"question", "context"}, ...]."""
        if (records is None) == (question is None and context is None):
            raise ValueError("give either question= and context=, or a list of {'question', 'context'} records")
        if records is None:
            context = _text("context", context or "", "the text to answer from")
            return self.ask([Question(context, _text("question", question or "", "a question"), "call")])[0]
        where = [f"record {n}" for n in range(1, len(records) + 1)]
        return self.ask([Question(*(_field(w, r, f) for f in FIELDS), source=w) for w, r in zip(where, records)])


def ask(path: str | Path, questions: Sequence[Question], options: QAJobOptions | None = None) -> list[Answer]:
    """Load the QA model at `path` and answer `questions` (checked before the model is loaded)."""
    _examples(questions)
    return QuestionAnswerer(path, options).ask(questions)
