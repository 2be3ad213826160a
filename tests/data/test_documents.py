"""Document sources (`posformer.data.documents`): the same documents as text files, a directory, a .jsonl file, a saved
`datasets` directory, a .parquet or a .json file give the same documents, the same token stream (each document's ids,
then the EOD id) and the same first training batches; bad records name their file and line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from posformer.data.documents import documents, source_files
from posformer.data.lm_tokenizers import build_tokenizer
from posformer.data.text import ByteTokenizer, CharTokenizer
from posformer.data.token_ids import document_ids
from posformer.train.batches import WindowBatches

datasets = pytest.importorskip("datasets")

DOCS = ["First document.\nTwo lines.", "Second: é 日本 😀", "third\tone\n", "fourth " * 30]


def write_text_files(root: Path) -> Path:
    """DOCS as root/doc-NN.txt, plus files a directory leaves out."""
    root.mkdir(parents=True)
    for i, text in enumerate(DOCS):
        (root / f"doc-{i:02d}.txt").write_text(text, encoding="utf-8", newline="")
    (root / "README.md").write_text("not a document")
    (root / ".hidden.txt").write_text("not a document either")
    return root


def write_jsonl(path: Path, texts: list[str] = DOCS, field: str = "text") -> Path:
    lines = [json.dumps({"id": i, field: text}, ensure_ascii=i % 2 == 0) for i, text in enumerate(texts)]
    path.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n", encoding="utf-8")  # a blank line is skipped
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, list[Path]]:
    root = tmp_path_factory.mktemp("sources")
    directory = write_text_files(root / "texts")
    table = datasets.Dataset.from_dict({"id": list(range(len(DOCS))), "text": DOCS})
    table.save_to_disk(str(root / "saved"))
    table.to_parquet(str(root / "docs.parquet"))
    table.to_json(str(root / "docs.json"), force_ascii=False)
    nested = root / "nested"  # a directory of parts, read in path order: a/ before b.jsonl before c.parquet
    (nested / "a").mkdir(parents=True)
    (nested / "a" / "0.txt").write_text(DOCS[0], encoding="utf-8", newline="")
    write_jsonl(nested / "b.jsonl", DOCS[1:3])
    datasets.Dataset.from_dict({"text": DOCS[3:]}).to_parquet(str(nested / "c.parquet"))
    return {
        "text files": sorted(directory.glob("doc-*.txt")),
        "directory": [directory],
        "jsonl": [write_jsonl(root / "docs.jsonl")],
        "saved dataset": [root / "saved"],
        "parquet": [root / "docs.parquet"],
        "json": [root / "docs.json"],
        "mixed directory": [nested],
        "text file + jsonl": [directory / "doc-00.txt", write_jsonl(root / "rest.jsonl", DOCS[1:])],
    }


KINDS = ["text files", "directory", "jsonl", "saved dataset", "parquet", "json", "mixed directory", "text file + jsonl"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_source_gives_the_same_documents_tokens_and_batches(sources, kind: str) -> None:
    assert list(documents(sources[kind])) == DOCS
    for tokenizer in (CharTokenizer.from_documents(DOCS), ByteTokenizer()):
        ids = document_ids(documents(sources[kind]), tokenizer)
        expected = [i for text in DOCS for i in tokenizer.encode(text) + [tokenizer.eod_id]]
        assert ids.dtype == torch.long and ids.tolist() == expected
        got, want = WindowBatches(ids, 8, seed=3), WindowBatches(torch.tensor(expected), 8, seed=3)
        for _ in range(3):
            assert torch.equal(got.next_batch(4)["input_ids"], want.next_batch(4)["input_ids"])


def test_the_eod_id_ends_every_document_and_the_char_vocabulary_is_the_documents(sources) -> None:
    tokenizer = build_tokenizer("char", lambda: documents(sources["jsonl"]))
    assert tokenizer.chars == sorted(set("".join(DOCS))) and tokenizer.eod_id == len(tokenizer.chars)
    assert tokenizer.vocab_size == len(tokenizer.chars) + 1
    ids = document_ids(documents(sources["jsonl"]), tokenizer).tolist()
    ends = [i for i, token in enumerate(ids) if token == tokenizer.eod_id]
    starts = [0] + [end + 1 for end in ends[:-1]]
    assert [tokenizer.decode(ids[s:e]) for s, e in zip(starts, ends)] == DOCS and ends[-1] == len(ids) - 1
    assert tokenizer.decode(ids).count("<|endoftext|>") == len(DOCS)


def test_a_directory_reads_its_documents_in_path_order_and_skips_the_rest(sources, tmp_path) -> None:
    nested = sources["mixed directory"][0]
    assert [p.relative_to(nested).as_posix() for p in source_files(nested)] == ["a/0.txt", "b.jsonl", "c.parquet"]
    assert [p.name for p in source_files(sources["directory"][0])] == [f"doc-{i:02d}.txt" for i in range(len(DOCS))]
    (tmp_path / "empty.txt").write_text("")  # an empty document is skipped
    assert list(documents([tmp_path / "empty.txt", *sources["jsonl"]])) == DOCS
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "notes.md").write_text("x")
    with pytest.raises(ValueError, match=r"only holds no documents: no \.txt, \.jsonl, \.parquet file"):
        source_files(tmp_path / "only")
    with pytest.raises(FileNotFoundError, match="nope does not exist"):
        list(documents([tmp_path / "nope"]))


def test_the_text_field_is_named(tmp_path) -> None:
    path = write_jsonl(tmp_path / "body.jsonl", DOCS, field="body")
    assert list(documents([path], text_field="body")) == DOCS
    with pytest.raises(ValueError, match=r"body.jsonl, line 1 has no field 'text' \(its fields: id, body\)"):
        list(documents([path]))
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"body": DOCS}).save_to_disk(str(saved))
    assert list(documents([saved], text_field="body")) == DOCS
    with pytest.raises(ValueError, match=r"saved has no column 'text' \(its columns: body\)"):
        list(documents([saved]))


@pytest.mark.parametrize(
    "line,words",
    [
        ('{"text": "a", ', "line 3 is not valid JSON"),
        ('["a"]', "line 3: expected a JSON object with a string field 'text'"),
        ('{"text": 5}', "line 3: field 'text' is 5, not a string"),
        ('{"text": null}', "line 3: field 'text' is None, not a string"),
    ],
)
def test_a_bad_jsonl_line_is_named(tmp_path, line: str, words: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(f'{{"text": "one"}}\n{{"text": "two"}}\n{line}\n{{"text": "four"}}\n')
    read = documents([path])
    assert [next(read), next(read)] == ["one", "two"]  # streamed: the lines before the bad one are read
    with pytest.raises(ValueError, match=f"^{path}, {words}"):
        next(read)


def test_invalid_utf8_names_the_line(tmp_path) -> None:
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "\xff"}\n')
    with pytest.raises(ValueError, match=f"^{path}, line 2 is not valid UTF-8"):
        list(documents([path]))


def test_a_bad_dataset_row_is_named(tmp_path) -> None:
    path = tmp_path / "rows.parquet"
    datasets.Dataset.from_dict({"text": ["a", None, "c"]}).to_parquet(str(path))
    with pytest.raises(ValueError, match=f"^{path}, row 2: field 'text' is None, not a string"):
        list(documents([path]))
    splits = tmp_path / "dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": DOCS})}).save_to_disk(str(splits))
    with pytest.raises(ValueError, match="holds a DatasetDict .splits: train.: give one split's directory"):
        list(documents([splits]))
    assert list(documents([splits / "train"])) == DOCS


def test_without_datasets_an_import_error_says_how_to_install_it(sources, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    for kind in ("saved dataset", "parquet"):
        with pytest.raises(ImportError, match="pip install datasets"):
            list(documents(sources[kind]))
    assert list(documents(sources["jsonl"])) == DOCS  # JSON Lines and text need no `datasets`
