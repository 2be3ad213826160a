"""SQuAD data: loaders for the official schema and flat JSON/JSONL records, errors, answer checks, splits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from posformer.data.squad import (
    UNLOCATED,
    QADataError,
    QAExample,
    load_hf_dataset,
    load_qa_file,
    load_squad_json,
    split_by_article,
    squad_more_training,
    squad_sample,
)
from shared_data import squad_dev_file

SAMPLE_TITLES = [
    "Normans",
    "Southern_California",
    "Sky_(United_Kingdom)",
    "Victoria_(Australia)",
    "1973_oil_crisis",
    "Amazon_rainforest",
    "Fresno,_California",
    "Black_Death",
    "Geology",
    "Pharmacy",
    "Construction",
    "Private_school",
    "Harvard_University",
    "Jacksonville,_Florida",
    "Intergovernmental_Panel_on_Climate_Change",
]


@pytest.fixture(scope="module")
def dev():
    return load_squad_json(squad_dev_file())


def squad(qas: list, context: str = "The cat sat on the mat.", title: str = "Cats") -> dict:
    return {"version": "v2.0", "data": [{"title": title, "paragraphs": [{"context": context, "qas": qas}]}]}


def write(tmp_path: Path, name: str, obj) -> Path:
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in obj))
    else:
        path.write_text(json.dumps(obj))
    return path


def test_real_dev_counts(dev):
    assert len(dev) == 11873
    assert sum(not ex.is_impossible for ex in dev) == 5928
    assert len({ex.title for ex in dev}) == 35
    assert dev.report.bad_answers == 0 and dev.report.dropped_questions == 0
    first = dev[0]
    assert first.id == "56ddde6b9a695914005b9628" and first.title == "Normans"
    assert first.answers == ["France"] * 4 and first.answer_starts == [159] * 4
    assert all(ex.context[s : s + len(t)] == t for ex in dev for t, s in zip(ex.answers, ex.answer_starts))


def test_sample_ships_whole_articles():
    path = squad_sample()
    assert path.is_file() and path.stat().st_size < 1_200_000
    data = load_qa_file(path)
    assert len(data) == 3776 and sum(not ex.is_impossible for ex in data) == 1808
    assert [t for i, t in enumerate(ex.title for ex in data) if i == 0 or t != data[i - 1].title] == SAMPLE_TITLES
    assert "squad_v2_sample.json" in (path.parent / "SOURCE.md").read_text()


def test_sample_is_cut_unchanged_from_dev(dev):
    sample = {ex.id: ex for ex in load_squad_json(squad_sample())}
    whole = [ex for ex in dev if ex.title in SAMPLE_TITLES]
    assert [ex.id for ex in whole] == list(sample) and all(sample[ex.id] == ex for ex in whole)


def test_the_more_training_articles_and_the_sample_are_the_whole_dev_set_cut_unchanged(dev):
    more = {ex.id: ex for ex in load_squad_json(squad_more_training())}
    rest = [ex for ex in dev if ex.title not in SAMPLE_TITLES]
    assert [ex.id for ex in rest] == list(more) and all(more[ex.id] == ex for ex in rest)
    assert len({ex.title for ex in rest}) == 20 and len(more) == 8097
    assert "squad_v2_more_training.json" in (squad_more_training().parent / "SOURCE.md").read_text()


def test_qa_train_without_data_flags_trains_on_32_articles_and_holds_out_the_samples_three():
    from posformer.tasks.qa.job_data import load_train_examples
    from posformer.tasks.qa.options import QAJobOptions

    train, held = load_train_examples(QAJobOptions(), lambda line: None)
    held_titles = {ex.title for ex in held}
    assert held_titles == {"Amazon_rainforest", "Normans", "Pharmacy"} and len(held) == 736
    assert len({ex.title for ex in train}) == 32 and not held_titles & {ex.title for ex in train}
    assert len(train) == 3776 - 736 + 8097


def test_flat_records_json_and_jsonl_in_every_answer_form(tmp_path):
    context = "Paris is the capital of France."
    records = [
        {"id": "a", "context": context, "question": "Capital?", "answers": {"text": ["Paris"], "answer_start": [0]}},
        {"id": "b", "context": context, "question": "Country?", "answers": [{"text": "France", "answer_start": 24}]},
        {"id": "c", "context": context, "question": "Moon?", "answers": {"text": [], "answer_start": []}},
        {"id": "d", "context": context, "question": "Sun?", "answers": []},
        {"id": 5, "context": context, "question": "Mars?", "answers": None, "title": "France"},
    ]
    for name, obj in [("r.jsonl", records), ("r.json", records), ("d.json", {"data": records})]:
        data = load_qa_file(write(tmp_path, name, obj))
        assert [ex.id for ex in data] == ["a", "b", "c", "d", "5"]
        assert data[0] == QAExample("a", "", context, "Capital?", ["Paris"], [0])
        assert data[1].answers == ["France"] and data[1].answer_starts == [24]
        assert [ex.is_impossible for ex in data] == [False, False, True, True, True]
        assert data[4].title == "France"


def test_named_columns(tmp_path):
    rec = {"qid": "x", "passage": "abc def", "query": "q?", "gold": {"text": ["def"], "answer_start": [4]}}
    data = load_qa_file(
        write(tmp_path, "c.jsonl", [rec]),
        context_column="passage",
        question_column="query",
        answer_column="gold",
        id_column="qid",
    )
    assert data[0] == QAExample("x", "", "abc def", "q?", ["def"], [4])
    with pytest.raises(QADataError, match=r"c.jsonl: record 0 \(id 'x'\): missing field 'context'"):
        load_qa_file(tmp_path / "c.jsonl", id_column="qid")
    with pytest.raises(QADataError, match=r"c.jsonl: record 0: missing field 'id'"):
        load_qa_file(tmp_path / "c.jsonl")


def test_squad_schema_is_detected_in_a_json_file(tmp_path):
    path = write(
        tmp_path,
        "s.json",
        squad([{"id": "q1", "question": "Who sat?", "answers": [{"text": "cat", "answer_start": 4}]}]),
    )
    assert load_qa_file(path).examples == [QAExample("q1", "Cats", "The cat sat on the mat.", "Who sat?", ["cat"], [4])]


@pytest.mark.parametrize(
    "qa, message",
    [
        ({"question": "q", "answers": []}, r"record 0 in article 'Cats', paragraph 0: missing field 'id'"),
        ({"id": "q1", "answers": []}, r"record 0 \(id 'q1'\).*missing field 'question'"),
        ({"id": "q1", "question": "q"}, r"\(id 'q1'\).*missing field 'answers'"),
        ({"id": "q1", "question": 3, "answers": []}, r"\(id 'q1'\).*'question' must be str, got int"),
        (
            {"id": "q1", "question": "q", "answers": [{"text": "cat", "answer_start": "4"}]},
            r"\(id 'q1'\).*answer 0: answer_start must be an int, got '4'",
        ),
        (
            {"id": "q1", "question": "q", "answers": [{"text": "cat", "answer_start": True}]},
            r"answer_start must be an int, got True",
        ),
        ({"id": "q1", "question": "q", "answers": [{"text": "cat", "answer_start": -2}]}, r"must be >= 0"),
        ({"id": "q1", "question": "q", "answers": [{"answer_start": 4}]}, r"answer 0: missing field 'text'"),
        ({"id": "q1", "question": "q", "answers": [], "is_impossible": "no"}, r"is_impossible must be true or false"),
        (
            {"id": "q1", "question": "q", "answers": [{"text": "cat", "answer_start": 4}], "is_impossible": True},
            r"is_impossible is true but the question has 1 answer",
        ),
        ("not a dict", r"record 0 in article 'Cats', paragraph 0: expected a JSON object, got str"),
    ],
)
def test_malformed_squad_questions(tmp_path, qa, message):
    path = write(tmp_path, "bad.json", squad([qa]))
    with pytest.raises(QADataError, match=message) as err:
        load_squad_json(path)
    assert str(path) in str(err.value)


def test_malformed_files(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(QADataError, match=r"broken.json is not valid JSON"):
        load_qa_file(bad)
    lines = tmp_path / "broken.jsonl"
    lines.write_text('{"id": "a"}\n{oops\n')
    with pytest.raises(QADataError, match=r"broken.jsonl: line 2 \(record 1\) is not valid JSON"):
        load_qa_file(lines)
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        load_qa_file(tmp_path / "nowhere.json")
    with pytest.raises(QADataError, match=r"paragraph 0: missing field 'context'"):
        load_squad_json(write(tmp_path, "p.json", {"data": [{"title": "T", "paragraphs": [{"qas": []}]}]}))
    with pytest.raises(QADataError, match="not in the SQuAD schema"):
        load_squad_json(write(tmp_path, "flat.json", [{"id": "a"}]))
    rec = {"id": "a", "context": "xy", "question": "q", "answers": {"text": ["x", "y"], "answer_start": [0]}}
    with pytest.raises(QADataError, match=r"record 1 \(id 'a'\): answers has 2 text\(s\) but 1 answer_start"):
        load_qa_file(write(tmp_path, "m.jsonl", [dict(rec, answers=[]), rec]))
    with pytest.raises(QADataError, match=r"record 1 \(id 'a'\): duplicate id"):
        load_qa_file(write(tmp_path, "dup.jsonl", [dict(rec, answers=[]), dict(rec, answers=[])]))
    with pytest.raises(QADataError, match="answers must be a dict of lists or a list of dicts, got str"):
        load_qa_file(write(tmp_path, "s.jsonl", [dict(rec, answers="x")]))


def test_bad_answers_counted_reported_and_skipped(tmp_path):
    qas = [
        {"id": "ok", "question": "q", "answers": [{"text": "cat", "answer_start": 4}]},
        {
            "id": "some",
            "question": "q",
            "answers": [{"text": "mat", "answer_start": 19}, {"text": "mat", "answer_start": 3}],
        },
        {
            "id": "none",
            "question": "q",
            "answers": [{"text": "dog", "answer_start": 4}, {"text": "cat", "answer_start": 40}],
        },
        {"id": "empty", "question": "q", "answers": []},
    ]
    path = write(tmp_path, "s.json", squad(qas))
    train = load_squad_json(path)
    assert [ex.id for ex in train] == ["ok", "some", "empty"]
    assert train[1].answers == ["mat"] and train[1].answer_starts == [19]
    report = train.report
    assert (report.bad_answers, report.dropped_questions, report.bad_ids) == (3, 1, ["some", "none"])
    assert "3 answer(s)" in report.summary() and "some, none" in report.summary() and str(path) in report.summary()
    evaluation = load_squad_json(path, for_training=False)
    assert [ex.id for ex in evaluation] == ["ok", "some", "none", "empty"]
    assert evaluation[2].answers == ["dog", "cat"] and evaluation[2].answer_starts == [UNLOCATED, UNLOCATED]
    assert evaluation[1].answer_starts == [19, UNLOCATED] and not evaluation[2].is_impossible
    assert evaluation.report.bad_answers == 3 and evaluation.report.dropped_questions == 0


def test_hf_dataset_without_datasets_names_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError, installed or not
    with pytest.raises(RuntimeError, match=r"--dataset-name squad_v2 needs .*`datasets`.*--train-file"):
        load_hf_dataset("squad_v2", "validation")


def _examples(titles: list[str], per: int = 3) -> list[QAExample]:
    return [QAExample(f"{t}-{i}", t, f"context of {t}", "q?") for t in titles for i in range(per)]


def test_split_by_article_disjoint_deterministic_complete():
    titles = [f"art{i}" for i in range(10)]
    examples = _examples(titles)
    train, held = split_by_article(examples, eval_fraction=0.2, seed=3)
    assert {ex.title for ex in train}.isdisjoint({ex.title for ex in held})
    assert len({ex.title for ex in held}) == 2 and len(train) + len(held) == len(examples)
    assert sorted(ex.id for ex in train + held) == sorted(ex.id for ex in examples)
    assert train == [ex for ex in examples if ex in train]
    assert split_by_article(list(reversed(examples)), eval_fraction=0.2, seed=3)[1] == list(reversed(held))
    assert split_by_article(examples, eval_fraction=0.2, seed=3) == (train, held)
    assert {ex.title for ex in split_by_article(examples, eval_fraction=0.01, seed=0)[1]} != set()
    assert split_by_article(examples, eval_fraction=0.99, seed=0)[0] != []
    by_name = split_by_article(examples, eval_articles=["art1", "art7"])
    assert {ex.title for ex in by_name[1]} == {"art1", "art7"}
    with pytest.raises(ValueError, match="not in the data"):
        split_by_article(examples, eval_articles=["nope"])
    with pytest.raises(ValueError, match="exactly one"):
        split_by_article(examples)


def test_split_without_titles_groups_by_context():
    examples = [QAExample(str(i), "", f"ctx{i % 4}", "q?") for i in range(12)]
    train, held = split_by_article(examples, eval_fraction=0.25, seed=1)
    assert {ex.context for ex in train}.isdisjoint({ex.context for ex in held}) and len(held) == 3


def test_split_real_dev(dev):
    train, held = split_by_article(dev.examples, eval_fraction=0.2, seed=0)
    assert len({ex.title for ex in held}) == 7 and len(train) + len(held) == 11873
    assert {ex.title for ex in train}.isdisjoint({ex.title for ex in held})


def test_a_hub_dataset_without_the_datasets_library_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(RuntimeError, match=r"--dataset-name squad_v2 needs .*pip install 'posformer\[datasets\]'"):
        load_hf_dataset("squad_v2", "train")
