"""`posformer tokenizer train` writes a deterministic byte-level BPE tokenizer that AutoTokenizer loads, with
`<|endoftext|>` as its eos token; `data.tokenizer` takes its directory or its tokenizer.json, and refuses a tokenizer
with no end-of-document token by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models
from transformers import AutoTokenizer

from posformer.cli import main
from posformer.data.lm_tokenizers import build_tokenizer
from posformer.data.text import CharTokenizer, default_corpus, read_text
from train_helpers import tiny_run, write_config

TEXT = "First line.\r\nTab\there, é 日本 😀 ü\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A directory of text files and a .jsonl file of the shipped sample's paragraphs."""
    root = tmp_path_factory.mktemp("corpus")
    parts = [p for p in read_text(default_corpus())[:30_000].split("\n\n") if p.strip()]
    (root / "books").mkdir()
    for i, text in enumerate(parts[:20]):
        (root / "books" / f"{i:02d}.txt").write_text(text, encoding="utf-8")
    (root / "more.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in parts[20:]), encoding="utf-8")
    return root


def train_tokenizer(corpus: Path, out: Path, *extra: str) -> Path:
    data = [str(corpus / "books"), str(corpus / "more.jsonl")]
    assert main(["tokenizer", "train", "--data", *data, "--vocab-size", "400", "--out", str(out), *extra]) == 0
    return out


def test_the_same_documents_give_the_same_files_byte_for_byte(corpus: Path, tmp_path: Path, capsys) -> None:
    first = train_tokenizer(corpus, tmp_path / "a", "--no-progress")
    second = train_tokenizer(corpus, tmp_path / "b", "--no-progress")
    assert capsys.readouterr().out.startswith(f"wrote {first}: tokenizer.json, tokenizer_config.json")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
        assert (first / name).read_text().isascii()
    sampled = train_tokenizer(corpus, tmp_path / "c", "--no-progress", "--max-documents", "10", "--seed", "1")
    again = train_tokenizer(corpus, tmp_path / "d", "--no-progress", "--max-documents", "10", "--seed", "1")
    other = train_tokenizer(corpus, tmp_path / "e", "--no-progress", "--max-documents", "10", "--seed", "2")
    assert (sampled / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()
    assert (sampled / "tokenizer.json").read_bytes() != (other / "tokenizer.json").read_bytes()


def test_autotokenizer_loads_it_and_data_tokenizer_takes_its_directory_or_file(corpus: Path, tmp_path: Path) -> None:
    out = train_tokenizer(corpus, tmp_path / "tok", "--no-progress")
    hf = AutoTokenizer.from_pretrained(out)
    assert len(hf) == 400 and hf.eos_token == "<|endoftext|>" and hf.eos_token_id == 0
    ids = hf(TEXT)["input_ids"]
    assert hf.decode(ids) == TEXT and len(ids) < len(TEXT.encode("utf-8"))  # merges: fewer tokens than bytes
    for spec in (out, out / "tokenizer.json"):
        ours = build_tokenizer(str(spec), lambda: [])
        assert ours.encode(TEXT) == ids and ours.eod_id == 0 and ours.vocab_size == 400
        assert ours.decode(ids + [0]) == TEXT + "<|endoftext|>"
        saved = tmp_path / f"saved-{spec.name}"
        saved.mkdir()
        for name, text in ours.files().items():
            assert text.isascii()
            (saved / name).write_text(text)
        assert AutoTokenizer.from_pretrained(saved)(TEXT)["input_ids"] == ids
        assert AutoTokenizer.from_pretrained(saved).eos_token_id == 0


def test_a_tokenizer_without_an_end_of_document_token_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    Tokenizer(models.BPE(vocab={"a": 0, "b": 1}, merges=[])).save(str(path))
    with pytest.raises(ValueError, match=r"^data.tokenizer='.*tokenizer.json': the tokenizer has no end-of-document"):
        build_tokenizer(str(path), lambda: [])
    path.write_text("{broken")
    with pytest.raises(ValueError, match=r"^data.tokenizer='.*tokenizer.json' is not a tokenizers tokenizer.json"):
        build_tokenizer(str(path), lambda: [])
    with pytest.raises(ValueError, match=r"^data.tokenizer='nope': expected 'char', 'bytes', a directory"):
        build_tokenizer("nope", lambda: [])


def test_a_directory_of_posformers_char_tokenizer_is_used_as_one_with_its_eod(tmp_path: Path) -> None:
    CharTokenizer.from_text(TEXT).save_pretrained(tmp_path / "new")
    loaded = build_tokenizer(str(tmp_path / "new"), lambda: [])
    assert isinstance(loaded, CharTokenizer) and loaded.eod_id == len(set(TEXT))
    CharTokenizer(sorted(set(TEXT)), eod=False).save_pretrained(tmp_path / "old")  # written before the EOD
    with pytest.raises(ValueError, match=r"^data.tokenizer='.*old': the tokenizer has no end-of-document token"):
        build_tokenizer(str(tmp_path / "old"), lambda: [])


def test_vocab_size_below_the_byte_alphabet_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["tokenizer", "train", "--data", str(tmp_path), "--vocab-size", "100", "--out", str(tmp_path / "t")])
    assert "--vocab-size" in capsys.readouterr().err


def test_a_run_trained_with_it_stores_it_and_generates(corpus: Path, tmp_path: Path, capsys) -> None:
    out = train_tokenizer(corpus, tmp_path / "tok", "--no-progress")
    config = tiny_run(corpus / "more.jsonl", steps=2, eval_every=2)
    config["data"] |= {"train": [str(corpus / "books"), str(corpus / "more.jsonl")], "tokenizer": str(out)}
    run = tmp_path / "run"
    assert main(["train", "--config", str(write_config(tmp_path / "run.yaml", config)), "--output-dir", str(run)]) == 0
    checkpoint = run / "checkpoints" / "step-00000002"
    assert json.loads((checkpoint / "config.json").read_text())["posformer"]["eos_token_id"] == 0
    assert (
        AutoTokenizer.from_pretrained(checkpoint)(TEXT)["input_ids"]
        == AutoTokenizer.from_pretrained(out)(TEXT)["input_ids"]
    )
    capsys.readouterr()
    assert main(["generate", "--model", str(run), "--prompt", "ROMEO:", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")
