"""posformer's character and byte tokenizers as Hugging Face files (`posformer.hf.char_byte_tokenizers`):
AutoTokenizer reads what posformer writes with the same ids and decodes the text exactly, knows the end-of-document
id as its eos token, and the `{"type": "char"}` tokenizer.json of runs trained before (and the files without an EOD)
still load everywhere, with the same ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import posformer as pf
from posformer.checkpoints.native import save_pretrained
from posformer.cli import main
from posformer.data.text import ByteTokenizer, CharTokenizer, default_corpus, read_text
from posformer.hf.char_byte_tokenizers import EOD_TOKEN, bytes_to_unicode, char_tokenizer, tokenizer_files
from posformer.loading import copy_tokenizer_files, load_text_tokenizer

# newlines (\n, \r\n), tabs, runs of spaces, regex-special characters, spaces before punctuation (which
# transformers' clean-up would remove), non-ASCII and emoji
TEXT = "First line.\r\nTab\there,  two  spaces . and , 's n't\n\n[a-z]*+?^$|\\(){}.\"'<>\né 日本 😀 ü\u00a0end \n"


def hf_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text)["input_ids"]


def assert_same_tokenizer(hf, ours, text: str) -> None:
    ids = ours.encode(text)
    assert hf_ids(hf, text) == ids
    assert hf.decode(ids) == text
    eod = getattr(ours, "eod_id", None)
    assert hf.all_special_ids == ([] if eod is None else [eod]) and hf.eos_token_id == eod
    if eod is not None:  # the EOD id between two texts: posformer and AutoTokenizer decode it alike
        joined = ids + [eod] + ours.encode(text[::-1])
        assert hf.decode(joined) == ours.decode(joined) == text + EOD_TOKEN + text[::-1]
        assert hf.decode(joined, skip_special_tokens=True) == text + text[::-1]


def test_a_saved_char_tokenizer_loads_in_autotokenizer_with_the_same_ids(tmp_path: Path) -> None:
    ours = CharTokenizer.from_text(TEXT + read_text(default_corpus())[:2000])
    ours.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    hf = AutoTokenizer.from_pretrained(tmp_path)
    every_char = "".join(ours.chars)
    for text in (TEXT, every_char, every_char[::-1], "", " ", "\n"):
        assert_same_tokenizer(hf, ours, text)
    assert hf_ids(hf, every_char) == list(range(len(ours.chars))) and len(hf) == ours.vocab_size == len(ours.chars) + 1
    assert hf.convert_ids_to_tokens([ours.eod_id]) == [EOD_TOKEN] and ours.eod_id == len(ours.chars)
    assert_same_tokenizer(pf.load_tokenizer(tmp_path), ours, TEXT)
    assert CharTokenizer.load(tmp_path).chars == CharTokenizer.load(tmp_path / "tokenizer.json").chars == ours.chars
    loaded = load_text_tokenizer(tmp_path)
    assert isinstance(loaded, CharTokenizer) and loaded.encode(TEXT) == ours.encode(TEXT)
    assert loaded.eod_id == ours.eod_id and loaded.vocab_size == ours.vocab_size
    with pytest.raises(ValueError, match="not in the tokenizer"):
        loaded.encode("€")


def test_a_saved_byte_tokenizer_loads_in_autotokenizer_with_the_same_ids(tmp_path: Path) -> None:
    ours = ByteTokenizer()
    ours.save_pretrained(tmp_path)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    assert len(hf) == ours.vocab_size == 257 and ours.eod_id == 256
    assert hf.convert_ids_to_tokens(list(range(257))) == [bytes_to_unicode()[b] for b in range(256)] + [EOD_TOKEN]
    for text in (TEXT, "", " ", "  \t\n", "\x00\x7f", "".join(map(chr, range(1, 1000, 7)))):
        assert_same_tokenizer(hf, ours, text)
    broken = [0xFF, 0x41, 0xE6, 0x97, 0x20, 0xC3]  # invalid UTF-8: both replace it with U+FFFD alike
    assert hf.decode(broken) == ours.decode(broken)
    assert hf.decode(broken + [256] + broken) == ours.decode(broken + [256] + broken)
    loaded = load_text_tokenizer(tmp_path)
    assert loaded.encode(TEXT) == ours.encode(TEXT) and loaded.decode(ours.encode(TEXT)) == TEXT


def test_file_text_is_ascii_whatever_the_vocabulary(tmp_path: Path) -> None:
    """The trainer writes extra files with the platform's default encoding: ASCII reads back the same everywhere."""
    for files in (CharTokenizer.from_text(TEXT).files(), ByteTokenizer().files()):
        assert all(text.isascii() for text in files.values())
        assert json.loads(files["tokenizer_config.json"])["tokenizer_class"] == "PreTrainedTokenizerFast"


def legacy_dir(directory: Path, chars: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps({"type": "char", "chars": chars}))
    return directory


def test_a_char_tokenizer_file_without_an_eod_loads_everywhere_with_the_same_ids(tmp_path: Path) -> None:
    """The Hugging Face files of runs trained before posformer had an end-of-document token."""
    ours = CharTokenizer(CharTokenizer.from_text(TEXT).chars, eod=False)
    for name, text in tokenizer_files(char_tokenizer(ours.chars)).items():
        (tmp_path / name).write_text(text)
    assert_same_tokenizer(AutoTokenizer.from_pretrained(tmp_path), ours, TEXT)
    assert_same_tokenizer(pf.load_tokenizer(tmp_path), ours, TEXT)
    loaded = load_text_tokenizer(tmp_path)
    assert isinstance(loaded, CharTokenizer) and loaded.eod_id is None and loaded.vocab_size == len(ours.chars)
    assert CharTokenizer.load(tmp_path).eod_id is None


def test_a_legacy_char_tokenizer_loads_everywhere_with_the_same_ids(tmp_path: Path) -> None:
    ours = CharTokenizer(CharTokenizer.from_text(TEXT).chars, eod=False)
    directory = legacy_dir(tmp_path / "old", ours.chars)
    assert_same_tokenizer(pf.load_tokenizer(directory), ours, TEXT)
    loaded = load_text_tokenizer(directory)
    assert isinstance(loaded, CharTokenizer) and loaded.chars == ours.chars
    assert CharTokenizer.load(directory / "tokenizer.json").chars == ours.chars
    out = tmp_path / "export"
    out.mkdir()
    assert copy_tokenizer_files(directory, out, hf_only=True) == ["tokenizer.json", "tokenizer_config.json"]
    assert_same_tokenizer(AutoTokenizer.from_pretrained(out), ours, TEXT)
    verbatim = tmp_path / "verbatim"
    verbatim.mkdir()
    assert copy_tokenizer_files(directory, verbatim) == ["tokenizer.json"]
    assert (verbatim / "tokenizer.json").read_bytes() == (directory / "tokenizer.json").read_bytes()


def test_convert_to_hf_of_a_legacy_char_run_writes_an_autotokenizer_tokenizer(tmp_path: Path) -> None:
    ours = CharTokenizer(CharTokenizer.from_text(TEXT).chars, eod=False)
    cfg = pf.Config.preset(
        "llama", vocab_size=ours.vocab_size, d_model=16, n_layers=1, n_heads=2, d_ff=32, hf_model_type="llama"
    )
    model = tmp_path / "model"
    save_pretrained(pf.Transformer(cfg), model, {"tokenizer.json": json.dumps({"type": "char", "chars": ours.chars})})
    assert main(["convert", "--to-hf", str(model), "--out", str(tmp_path / "hf")]) == 0
    assert_same_tokenizer(AutoTokenizer.from_pretrained(tmp_path / "hf"), ours, TEXT)


@pytest.mark.parametrize(
    "content,message",
    [
        ("{corrupt", "is not a valid tokenizer file"),
        ('{"type": "char", "chars": ["ab"]}', "is not a posformer character tokenizer file"),
        ('{"type": "char", "chars": ["a", "a"]}', "is not a posformer character tokenizer file"),
        ('{"type": "char"}', "is not a posformer character tokenizer file"),
    ],
)
def test_a_corrupt_tokenizer_file_is_a_value_error_naming_it(tmp_path: Path, content: str, message: str) -> None:
    CharTokenizer.from_text(TEXT).save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_text(content)
    for load in (pf.load_tokenizer, load_text_tokenizer):
        with pytest.raises(ValueError, match=message) as err:
            load(tmp_path)
        assert str(tmp_path / "tokenizer.json") in str(err.value)
    with pytest.raises(ValueError, match=str(tmp_path / "tokenizer.json")):
        CharTokenizer.load(tmp_path)


def test_train_with_bytes_writes_its_tokenizer_beside_the_model(tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "text.txt"
    corpus.write_text(read_text(default_corpus())[:4000] + TEXT * 20, encoding="utf-8")
    tiny = {"data.tokenizer": "bytes", "data.train": corpus, "data.seq_len": 16, "trainer.steps": 2}
    tiny |= {"trainer.eval_every": 2, "trainer.batch_size": 2, "trainer.eval_batches": 1, "trainer.sample_tokens": 0}
    tiny |= {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2, "model.d_ff": 32}
    flags = [arg for key, value in tiny.items() for arg in ("--set", f"{key}={value}")]
    run = tmp_path / "run"
    assert main(["train", "--output-dir", str(run), "--no-progress", *flags]) == 0
    checkpoint = next((run / "checkpoints").iterdir())
    assert_same_tokenizer(AutoTokenizer.from_pretrained(checkpoint), ByteTokenizer(), TEXT)
    assert json.loads((checkpoint / "config.json").read_text())["posformer"]["eos_token_id"] == ByteTokenizer.eod_id
    assert load_text_tokenizer(run).encode(TEXT) == list(TEXT.encode("utf-8"))
    capsys.readouterr()
    assert main(["generate", "--model", str(run), "--prompt", "é日", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.startswith("é日")
