"""`posformer data fetch`: datasets fetched from local mirrors and file:// URLs (never the network), checked by
sha256, written whole or not at all; the real table against the shared copies; the presets' missing-data errors."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from posformer.cli import main
from posformer.data.catalog import DATASETS
from posformer.data.fetch import FetchError, fetch, mirror_url, sha256_file
from posformer.data.shared import DATA_DIR_ENV, default_data_dir
from posformer.data.sources import Dataset, Derived, Download
from posformer.data.squad_rebuild import FIRST_OCCURRENCE, reconstructed_dev
from posformer.experiments.corpus import HELD_OUT_BOOKS, load_corpus
from posformer.experiments.longeval.haystacks import book_files
from posformer.utils.file_mode import umask_mode

FILES = {"a.txt": b"first file\n", "b.txt": b"second file, a little longer\n"}


def download(name: str, content: bytes, url: str) -> Download:
    return Download(name, url, len(content), hashlib.sha256(content).hexdigest(), "a test")


def tiny(name: str = "tiny", url_base: str = "https://example.invalid/tiny", **fields) -> Dataset:
    """A dataset of FILES whose own URLs lie under `url_base`."""
    files = tuple(download(n, c, f"{url_base}/{n}") for n, c in FILES.items())
    return Dataset(name, "Tiny", "Two small files.", "CC0", "the tests", files, **fields)


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """A folder laid out like a data folder, holding tiny/ (FILES)."""
    folder = tmp_path / "mirror" / "tiny"
    folder.mkdir(parents=True)
    for name, content in FILES.items():
        (folder / name).write_bytes(content)
    return folder.parent


@pytest.fixture
def catalog(monkeypatch) -> Dataset:
    data = tiny()
    monkeypatch.setitem(DATASETS, data.name, data)
    return data


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_dataset_lands_checked_with_its_source_and_the_umask_mode(tmp_path, mirror, catalog):
    done = fetch("tiny", tmp_path / "data", mirror=str(mirror), progress=True)
    assert done.folder == tmp_path / "data" / "tiny"
    assert (done.fetched, done.present) == (["a.txt", "b.txt"], [])
    for name, content in FILES.items():
        assert (done.folder / name).read_bytes() == content
        assert (done.folder / name).stat().st_mode & 0o777 == umask_mode()
    source = (done.folder / "SOURCE.md").read_text(encoding="utf-8")
    assert all(f.sha256 in source and f.url in source for f in catalog.downloads)
    assert leftovers(done.folder) == []


def test_a_second_fetch_keeps_the_files_in_place(tmp_path, mirror, catalog):
    fetch("tiny", tmp_path, mirror=str(mirror), progress=False)
    (mirror / "tiny" / "a.txt").unlink()  # a second fetch reads nothing
    done = fetch("tiny", tmp_path, mirror=mirror.as_uri(), progress=False)
    assert (done.fetched, done.present) == ([], ["a.txt", "b.txt"])


def test_a_file_url_mirror_and_the_default_folder_of_the_locator(tmp_path, mirror, catalog, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "located"))
    done = fetch("tiny", mirror=mirror.as_uri() + "/", progress=False)
    assert done.folder == default_data_dir() / "tiny" == tmp_path / "located" / "tiny"
    assert (done.folder / "b.txt").read_bytes() == FILES["b.txt"]


def test_a_corrupted_source_is_an_error_naming_the_file_and_leaves_nothing(tmp_path, mirror, catalog):
    (mirror / "tiny" / "b.txt").write_bytes(b"second file, a little longer!\n")
    with pytest.raises(FetchError) as err:
        fetch("tiny", tmp_path, mirror=str(mirror), progress=False)
    message = str(err.value)
    assert "tiny/b.txt" in message and mirror_url(str(mirror), "tiny", "b.txt") in message
    assert "not the expected file" in message and f"copy the file by hand into {tmp_path / 'tiny'}" in message
    assert (tmp_path / "tiny" / "a.txt").read_bytes() == FILES["a.txt"]  # fetched before, kept
    assert not (tmp_path / "tiny" / "b.txt").exists() and leftovers(tmp_path / "tiny") == []


def test_a_longer_source_stops_at_the_expected_size(tmp_path, mirror, catalog):
    (mirror / "tiny" / "a.txt").write_bytes(FILES["a.txt"] * 1000)
    with pytest.raises(FetchError, match=r"tiny/a.txt .*got more than 11 bytes"):
        fetch("tiny", tmp_path, mirror=str(mirror), progress=False)
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == []


def test_a_missing_mirror_is_an_error_naming_the_file_and_the_url(tmp_path, catalog):
    nowhere = tmp_path / "nowhere"
    with pytest.raises(FetchError) as err:
        fetch("tiny", tmp_path / "data", mirror=str(nowhere), progress=False)
    message = str(err.value)
    assert message.startswith(f"could not download tiny/a.txt from {mirror_url(str(nowhere), 'tiny', 'a.txt')}")
    assert "--mirror" in message and "sha256 must be" in message
    assert leftovers(tmp_path / "data" / "tiny") == []


@pytest.mark.parametrize(
    "failure, reason",
    [
        (urllib.error.URLError("[Errno -3] Temporary failure in name resolution"), "name resolution"),
        (urllib.error.HTTPError("https://example.invalid/tiny/a.txt", 404, "Not Found", {}, None), "HTTP 404"),
        (TimeoutError("timed out"), "timed out"),
    ],
)
def test_an_unreachable_url_is_a_clear_error(tmp_path, catalog, monkeypatch, failure, reason):
    def refuse(url, timeout):
        assert timeout == 5.0
        raise failure

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    with pytest.raises(FetchError, match=rf"tiny/a.txt from https://example.invalid/tiny/a.txt: .*{reason}"):
        fetch("tiny", tmp_path, timeout=5.0, progress=False)


def test_a_derived_file_is_made_from_its_download_and_checked(tmp_path, mirror, monkeypatch):
    made = FILES["a.txt"].upper()
    derived = Derived("A.txt", "a.txt", bytes.upper, len(made), hashlib.sha256(made).hexdigest(), "upper case")
    data = tiny(url_base=(mirror / "tiny").as_uri(), derived=(derived,))
    monkeypatch.setitem(DATASETS, "tiny", data)
    assert [f.name for f in data.required] == ["b.txt", "A.txt"]  # a.txt is only the source of A.txt
    done = fetch("tiny", tmp_path, progress=False)
    assert done.fetched == ["b.txt", "A.txt"] and (done.folder / "A.txt").read_bytes() == made
    assert (done.folder / "a.txt").read_bytes() == FILES["a.txt"]
    (mirror / "tiny" / "a.txt").unlink()
    assert fetch("tiny", tmp_path, progress=False).present == ["b.txt", "A.txt"]


def test_a_derived_file_that_differs_is_an_error_that_keeps_its_source(tmp_path, mirror, monkeypatch):
    derived = Derived("A.txt", "a.txt", bytes.upper, 11, "0" * 64, "upper case")
    monkeypatch.setitem(DATASETS, "tiny", tiny(url_base=(mirror / "tiny").as_uri(), derived=(derived,)))
    with pytest.raises(FetchError, match=r"tiny/A.txt made from .*a.txt is not the recorded file"):
        fetch("tiny", tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == ["a.txt", "b.txt"]


def test_a_mirror_gives_a_derived_file_as_it_is(tmp_path, mirror, monkeypatch):
    made = b"made elsewhere\n"
    derived = Derived("A.txt", "a.txt", bytes.upper, len(made), hashlib.sha256(made).hexdigest(), "upper case")
    monkeypatch.setitem(DATASETS, "tiny", tiny(derived=(derived,)))
    (mirror / "tiny" / "a.txt").unlink()
    (mirror / "tiny" / "A.txt").write_bytes(made)
    assert fetch("tiny", tmp_path, mirror=str(mirror), progress=False).fetched == ["b.txt", "A.txt"]
    assert not (tmp_path / "tiny" / "a.txt").exists()


def test_the_cli_fetches_and_says_where(tmp_path, mirror, monkeypatch, capsys):
    monkeypatch.setitem(DATASETS, "wikitext-2", tiny("wikitext-2"))
    (mirror / "tiny").rename(mirror / "wikitext-2")
    argv = ["data", "fetch", "wikitext-2", "--to", str(tmp_path), "--mirror", str(mirror), "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"wikitext-2: 2 file(s) fetched, 0 already in place, in {tmp_path / 'wikitext-2'}" in out
    assert f"{DATA_DIR_ENV}={tmp_path.resolve()}" in out
    (mirror / "wikitext-2" / "a.txt").write_bytes(b"changed\n")
    (tmp_path / "wikitext-2" / "a.txt").unlink()
    assert main(argv) == 2
    assert "posformer data: error: wikitext-2/a.txt from file://" in capsys.readouterr().err


def test_the_cli_help_names_every_dataset_its_license_and_where_the_presets_look(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["data", "fetch", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(f" {name} " in text for name in DATASETS)
    assert "CC BY-SA 3.0" in text and "CC BY-SA 4.0" in text and f"${DATA_DIR_ENV}" in text


def test_an_unknown_dataset_is_refused_with_the_names():
    with pytest.raises(ValueError, match="dataset='wikitext-103' is invalid: expected one of gutenberg, wikitext-2"):
        fetch("wikitext-103")


def test_the_presets_missing_data_names_the_fetch_command(tmp_path):
    fetch_gutenberg = re.escape(f"`posformer data fetch gutenberg --to {tmp_path}`")
    with pytest.raises(FileNotFoundError, match=fetch_gutenberg):
        load_corpus("gutenberg", tmp_path, HELD_OUT_BOOKS, wikitext=False)
    with pytest.raises(FileNotFoundError) as err:
        load_corpus("shakespeare", tmp_path, [], wikitext=True)
    assert str(err.value).startswith(f"extrapolate: WikiText-2 file {tmp_path / 'wikitext-2' / 'test.txt'} does not")
    assert f"run `posformer data fetch wikitext-2 --to {tmp_path}`" in str(err.value)
    with pytest.raises(FileNotFoundError, match=fetch_gutenberg):
        book_files("eval", tmp_path)
    (tmp_path / "gutenberg").mkdir()
    with pytest.raises(FileNotFoundError, match=r"held-out book\(s\) .*`posformer data fetch gutenberg"):
        book_files("eval", tmp_path)


def test_squad_rebuild_keeps_the_official_offsets_or_takes_the_first_occurrence():
    title = sorted(FIRST_OCCURRENCE)[0]
    qa = {"question": "Q?", "id": "1", "answers": [{"text": "b", "answer_start": 3}], "is_impossible": False}
    impossible = {"plausible_answers": [{"text": "a", "answer_start": 0}], "question": "R?", "id": "2"}
    impossible |= {"answers": [], "is_impossible": True}
    paragraph = {"qas": [qa, impossible], "context": "a b b"}
    official = {"version": "v2.0", "data": [{"title": t, "paragraphs": [paragraph]} for t in (title, "Normans")]}
    rebuilt = json.loads(reconstructed_dev(json.dumps(official).encode()))
    starts = [a["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] for a in rebuilt["data"]]
    assert starts == [2, 3]
    assert all("plausible_answers" not in q for a in rebuilt["data"] for q in a["paragraphs"][0]["qas"])


def shared_file(name: str, file: str) -> Path:
    path = default_data_dir() / name / file
    if not path.is_file():
        pytest.skip(f"{path} is absent (${DATA_DIR_ENV} names the shared data folder)")
    return path


@pytest.mark.parametrize("name", ["tinyshakespeare", "wikitext-2"])
def test_the_table_matches_the_shared_copies(name):
    for f in DATASETS[name].required:
        path = shared_file(name, f.name)
        assert (path.stat().st_size, sha256_file(path)) == (f.size, f.sha256), path


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_the_table_agrees_with_the_shared_source_md(name):
    source = shared_file(name, "SOURCE.md").read_text(encoding="utf-8")
    for f in DATASETS[name].files:
        assert f.sha256 in source and f"{f.size:,}" in source, f.name
        if f in DATASETS[name].required:
            assert (default_data_dir() / name / f.name).stat().st_size == f.size


def test_squad_rebuild_gives_back_the_shared_file_from_an_official_shaped_one():
    """The shared copy with what the official file has besides (plausible answers; other offsets in the first-
    occurrence articles) comes back byte for byte."""
    path = shared_file("squad_v2", "dev-v2.0.reconstructed.json")
    data = json.loads(path.read_bytes())
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for i, qa in enumerate(paragraph["qas"]):
                if qa["is_impossible"]:
                    paragraph["qas"][i] = {"plausible_answers": [{"text": "x", "answer_start": 0}], **qa}
                elif article["title"] in FIRST_OCCURRENCE:
                    qa["answers"] = [{**a, "answer_start": a["answer_start"] + 7} for a in qa["answers"]]
    rebuilt = reconstructed_dev(json.dumps(data).encode())
    assert hashlib.sha256(rebuilt).hexdigest() == DATASETS["squad_v2"].derived[0].sha256
