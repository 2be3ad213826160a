"""SQuAD-style question answering data: loaders, answer checks and an article-disjoint split.

Three sources give the same `QAExample` records:

- `load_squad_json`: the official SQuAD JSON schema
  (``{"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
  "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}``);
- `load_qa_file`: JSON or JSONL files of flat records with named columns, the answers column in the
  Hugging Face `datasets` form ``{"text": [...], "answer_start": [...]}`` (a list of
  ``{"text", "answer_start"}`` dicts and an empty value for an unanswerable question are accepted too);
  a ``.json`` file in the SQuAD schema is detected and read by `load_squad_json`;
- `load_hf_dataset`: a hub dataset such as ``squad_v2`` through the optional `datasets` library.

Malformed files raise `QADataError`, naming the file, the record (index and id when known) and what is wrong.

Answers whose text is not found in the context at ``answer_start`` are counted in an `AnswerReport`.
What happens to them depends on ``for_training``:

- training (``True``, the default): the bad answer is dropped, and a question whose every answer is bad is
  dropped too (it must not turn into an unanswerable question);
- evaluation (``False``): the question and *all* its gold texts are kept, and the bad answers get
  ``answer_start = -1`` ("not located"). The official SQuAD metric reads only the answer texts, so the
  scores equal those of the official script on the same file.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posformer.utils.file_limits import DATA, not_blank
from posformer.utils.unicode_text import check_text
from posformer.utils.user_files import parse_json, read_json_file, read_text_file
from posformer.utils.validation import check_number, is_int

SAMPLES = Path(__file__).resolve().parent / "samples"
UNLOCATED = -1


class QADataError(ValueError):
    """A QA data file (or dataset) is malformed; the message names the file, the record and the problem."""


def squad_sample() -> Path:
    """The SQuAD v2 sample that ships with the package (15 dev articles; see samples/SOURCE.md)."""
    return SAMPLES / "squad_v2_sample.json"


def squad_more_training() -> Path:
    """The other 20 SQuAD v2 dev articles, shipped for training only: with the sample's training articles they are
    the default training data of `qa train`, whose evaluation articles stay the sample's (see samples/SOURCE.md)."""
    return SAMPLES / "squad_v2_more_training.json"


@dataclass(frozen=True)
class QAExample:
    """One question on one context. ``answers`` are the gold texts, ``answer_starts`` their character offsets."""

    id: str
    title: str
    context: str
    question: str
    answers: list[str] = field(default_factory=list)
    answer_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Refuse a context or question that no tokenizer takes (a lone surrogate), naming the example."""
        for name in ("context", "question"):
            value = getattr(self, name)
            if isinstance(value, str):
                check_text(f"QA example {self.id!r}: {name}", value)

    @property
    def is_impossible(self) -> bool:
        """True for an unanswerable question (no gold answer)."""
        return not self.answers


@dataclass
class AnswerReport:
    """What the answer check found: answers not located in their context, and the questions dropped for it."""

    source: str
    bad_answers: int = 0
    dropped_questions: int = 0
    bad_ids: list[str] = field(default_factory=list)

    def summary(self, n_ids: int = 5) -> str:
        """One line for the log; names up to ``n_ids`` question ids."""
        if not self.bad_answers:
            return f"{self.source}: every answer occurs in its context at answer_start"
        ids = ", ".join(self.bad_ids[:n_ids]) + (", ..." if len(self.bad_ids) > n_ids else "")
        return (
            f"{self.source}: {self.bad_answers} answer(s) not found in the context at answer_start "
            f"(skipped) in {len(self.bad_ids)} question(s): {ids}; "
            f"{self.dropped_questions} question(s) dropped"
        )


@dataclass
class QAData:
    """Loaded examples with the report of their answer check. Iterates and indexes like a list of examples."""

    examples: list[QAExample]
    report: AnswerReport

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[QAExample]:
        return iter(self.examples)

    def __getitem__(self, i: int) -> QAExample:
        return self.examples[i]


def _where(source: str, index: int, qid: Any = None) -> str:
    return f"{source}: record {index}" + (f" (id {qid!r})" if qid is not None else "")


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``obj[key]`` checked for presence and type; errors name the place and the field."""
    if not isinstance(obj, dict):
        raise QADataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise QADataError(f"{where}: missing field {key!r}")
    value = obj[key]
    if kind is object:
        return value
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise QADataError(f"{where}: field {key!r} must be {names}, got {type(value).__name__}")
    return value


def _start(value: Any, where: str) -> int:
    if not is_int(value):
        raise QADataError(f"{where}: answer_start must be an int, got {value!r}")
    if value < 0:
        raise QADataError(f"{where}: answer_start must be >= 0, got {value}")
    return value


def parse_answers(value: Any, where: str) -> tuple[list[str], list[int]]:
    """Answers in any accepted form -> (texts, starts). ``None``, ``[]`` or empty lists mean unanswerable."""
    if value is None:
        return [], []
    if isinstance(value, dict):
        texts = _get(value, "text", list, f"{where}, answers")
        starts = _get(value, "answer_start", list, f"{where}, answers")
        if len(texts) != len(starts):
            raise QADataError(f"{where}: answers has {len(texts)} text(s) but {len(starts)} answer_start(s)")
        items = list(zip(texts, starts))
    elif isinstance(value, list):
        items = [
            (_get(a, "text", str, f"{where}, answer {j}"), _get(a, "answer_start", object, f"{where}, answer {j}"))
            for j, a in enumerate(value)
        ]
    else:
        raise QADataError(f"{where}: answers must be a dict of lists or a list of dicts, got {type(value).__name__}")
    for j, (text, _) in enumerate(items):
        if not isinstance(text, str):
            raise QADataError(f"{where}, answer {j}: text must be a string, got {type(text).__name__}")
    return [t for t, _ in items], [_start(s, f"{where}, answer {j}") for j, (_, s) in enumerate(items)]


def check_answers(examples: Iterable[QAExample], source: str, for_training: bool = True) -> QAData:
    """Find answers whose text is not at ``answer_start`` in the context; skip or mark them (see module doc)."""
    report = AnswerReport(source)
    kept: list[QAExample] = []
    for ex in examples:
        good = [ex.context[s : s + len(t)] == t for t, s in zip(ex.answers, ex.answer_starts)]
        if all(good):
            kept.append(ex)
            continue
        report.bad_answers += good.count(False)
        report.bad_ids.append(ex.id)
        if not for_training:
            starts = [s if ok else UNLOCATED for s, ok in zip(ex.answer_starts, good)]
            kept.append(QAExample(ex.id, ex.title, ex.context, ex.question, list(ex.answers), starts))
        elif any(good):
            pairs = [(t, s) for t, s, ok in zip(ex.answers, ex.answer_starts, good) if ok]
            kept.append(
                QAExample(ex.id, ex.title, ex.context, ex.question, [t for t, _ in pairs], [s for _, s in pairs])
            )
        else:
            report.dropped_questions += 1
    return QAData(kept, report)


def _unique_ids(examples: list[QAExample], source: str) -> None:
    seen: set[str] = set()
    for i, ex in enumerate(examples):
        if ex.id in seen:
            raise QADataError(f"{_where(source, i, ex.id)}: duplicate id")
        seen.add(ex.id)


def _read_json(path: Path, lines: bool = False) -> Any:
    """The JSON value of a QA data file (with `lines`, the list of its JSON lines' values), read through
    `user_files`; a `QADataError` naming the file (and line) for anything but a missing file."""
    try:
        if not lines:
            return read_json_file(path, "QA data file", DATA)
        records: list[Any] = []
        for n, line in enumerate(read_text_file(path, "QA data file", DATA).removeprefix("\ufeff").splitlines(), 1):
            if line.strip():
                records.append(parse_json(line, f"{path}: line {n} (record {len(records)})"))
        return records
    except FileNotFoundError:
        raise
    except ValueError as err:
        raise QADataError(str(err)) from None


def is_squad_schema(obj: Any) -> bool:
    """True for the official SQuAD layout: ``data`` is a list of articles that have ``paragraphs``."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("data"), list)
        and any(isinstance(a, dict) and "paragraphs" in a for a in obj["data"])
    )


def parse_squad(obj: Any, source: str) -> list[QAExample]:
    """Examples from an already-parsed SQuAD JSON object. Records are numbered by question, from 0."""
    data = _get(obj, "data", list, source)
    out: list[QAExample] = []
    for a, article in enumerate(data):
        where_a = f"{source}: article {a}"
        title = _get(article, "title", str, where_a)
        for p, para in enumerate(_get(article, "paragraphs", list, f"{where_a} ({title!r})")):
            where_p = f"{where_a} ({title!r}), paragraph {p}"
            context = _get(para, "context", str, where_p)
            for qa in _get(para, "qas", list, where_p):
                qid = qa.get("id") if isinstance(qa, dict) else None
                where = f"{_where(source, len(out), qid)} in article {title!r}, paragraph {p}"
                qid = _get(qa, "id", (str, int), where)
                question = _get(qa, "question", str, where)
                texts, starts = parse_answers(_get(qa, "answers", list, where), where)
                impossible = qa.get("is_impossible", False)
                if not isinstance(impossible, bool):
                    raise QADataError(f"{where}: is_impossible must be true or false, got {impossible!r}")
                if impossible and texts:
                    raise QADataError(f"{where}: is_impossible is true but the question has {len(texts)} answer(s)")
                out.append(QAExample(str(qid), title, context, question, texts, starts))
    return out


def load_squad_json(path: str | Path, for_training: bool = True) -> QAData:
    """Read a file in the official SQuAD JSON schema (v1.1 or v2.0) and check its answers."""
    path = Path(path)
    obj = _read_json(path)
    if not is_squad_schema(obj):
        raise QADataError(
            f"{path}: not in the SQuAD schema (expected an object whose 'data' is a list "
            f"of articles with 'title' and 'paragraphs')"
        )
    examples = parse_squad(obj, str(path))
    _unique_ids(examples, str(path))
    return check_answers(examples, str(path), for_training)


def parse_record(
    rec: Any,
    index: int,
    source: str,
    context_column: str = "context",
    question_column: str = "question",
    answer_column: str = "answers",
    id_column: str = "id",
) -> QAExample:
    """One flat record -> `QAExample`. The ``title`` column is used when present (else the title is "")."""
    qid = rec.get(id_column) if isinstance(rec, dict) else None
    where = _where(source, index, qid)
    qid = _get(rec, id_column, (str, int), where)
    context = _get(rec, context_column, str, where)
    question = _get(rec, question_column, str, where)
    if answer_column not in rec:
        raise QADataError(f"{where}: missing field {answer_column!r}")
    texts, starts = parse_answers(rec[answer_column], where)
    title = rec.get("title") or ""
    if not isinstance(title, str):
        raise QADataError(f"{where}: field 'title' must be str, got {type(title).__name__}")
    return QAExample(str(qid), title, context, question, texts, starts)


def _records(path: Path) -> list[Any]:
    if path.suffix == ".jsonl":
        return _read_json(path, lines=True)
    obj = _read_json(path)
    if isinstance(obj, dict) and isinstance(obj.get("data"), list):
        return obj["data"]
    if isinstance(obj, list):
        return obj
    raise QADataError(f"{path}: expected a list of records, an object with a 'data' list, or the SQuAD schema")


def load_qa_file(
    path: str | Path,
    context_column: str = "context",
    question_column: str = "question",
    answer_column: str = "answers",
    id_column: str = "id",
    for_training: bool = True,
) -> QAData:
    """Read a JSON/JSONL file of flat records with the named columns; a SQuAD-schema .json goes to `load_squad_json`."""
    path = Path(not_blank(path, "QA data file"))
    if path.suffix != ".jsonl" and is_squad_schema(_read_json(path)):
        return load_squad_json(path, for_training)
    examples = [
        parse_record(rec, i, str(path), context_column, question_column, answer_column, id_column)
        for i, rec in enumerate(_records(path))
    ]
    if not examples:
        raise QADataError(f"{path}: no records")
    _unique_ids(examples, str(path))
    return check_answers(examples, str(path), for_training)


def load_hf_dataset(
    name: str,
    split: str,
    context_column: str = "context",
    question_column: str = "question",
    answer_column: str = "answers",
    id_column: str = "id",
    for_training: bool = True,
    config_name: str | None = None,
) -> QAData:
    """Load a hub dataset (e.g. ``squad_v2``) through the optional `datasets` library."""
    try:
        import datasets
    except ImportError:
        raise RuntimeError(
            f"--dataset-name {name} needs the Hugging Face `datasets` library, which is not installed "
            f"(pip install 'posformer[datasets]'; it also needs network access). Offline, pass --train-file/"
            f"--eval-file with a SQuAD JSON or JSONL file; a sample ships at {squad_sample()}"
        ) from None
    try:
        rows = datasets.load_dataset(name, config_name, split=split)
    except Exception as err:
        raise RuntimeError(
            f"could not load dataset {name!r} split {split!r} with `datasets` "
            f"(offline, or no such dataset/split?): {type(err).__name__}: {err}"
        ) from err
    source = f"dataset {name} ({split})"
    examples = [
        parse_record(dict(rec), i, source, context_column, question_column, answer_column, id_column)
        for i, rec in enumerate(rows)
    ]
    _unique_ids(examples, source)
    return check_answers(examples, source, for_training)


def article_key(ex: QAExample) -> str:
    """What groups examples into one article: the title, or the context when there is no title."""
    return ex.title or ex.context


def split_by_article(
    examples: Sequence[QAExample],
    eval_fraction: float | None = None,
    eval_articles: Iterable[str] | None = None,
    seed: int = 0,
) -> tuple[list[QAExample], list[QAExample]]:
    """Split into (train, eval) so that no article is in both; example order is kept within each part.

    Give either ``eval_fraction`` (the share of articles, at least one each side, drawn with ``seed``
    from the sorted titles, so the split does not depend on input order) or ``eval_articles`` (titles).
    """
    if (eval_fraction is None) == (eval_articles is None):
        raise ValueError("give exactly one of eval_fraction and eval_articles")
    titles = sorted({article_key(ex) for ex in examples})
    if eval_articles is not None:
        chosen = set(eval_articles)
        unknown = sorted(chosen - set(titles))
        if unknown:
            raise ValueError(f"eval_articles not in the data: {unknown[:5]}")
    else:
        check_number("eval_fraction", eval_fraction, low=0, high=1, low_open=True, high_open=True)
        if len(titles) < 2:
            raise ValueError(f"cannot split {len(titles)} article(s) into train and eval")
        n_eval = min(max(1, math.ceil(eval_fraction * len(titles))), len(titles) - 1)
        random.Random(seed).shuffle(titles)
        chosen = set(titles[:n_eval])
    train = [ex for ex in examples if article_key(ex) not in chosen]
    held = [ex for ex in examples if article_key(ex) in chosen]
    return train, held
