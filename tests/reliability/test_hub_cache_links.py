"""The hub cache exception of a model directory is no way out of it: `models--*/blobs` is trusted only as a real
directory of the repository folder, never as a symlink (to `/` or anywhere), and a snapshot reached through a
symlinked `snapshots` folder is judged where it really is. Both readers that open files by name, `convert`'s
copying of tokenizer files and the tokenizer loading of `generate`, refuse a file that leads outside, naming it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from checkpoint_fixtures import generate, refused, save_hf_llama

import posformer as pf
from posformer.checkpoints.model_dir import OutsideModelDir, model_file

SECRET = "TOP SECRET"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_hf_llama(tmp_path_factory.mktemp("hub-source") / "model")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "secret.txt"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def snapshot_of(source: Path, cache: Path, blobs_target: Path | str) -> Path:
    """A hub cache repository whose snapshot holds `source`'s files as plain files and whose blobs/ folder is a
    symlink to `blobs_target`."""
    repo = cache / "models--a--b"
    snapshot = repo / "snapshots" / "r"
    shutil.copytree(source, snapshot)
    (repo / "blobs").symlink_to(blobs_target)
    return snapshot


def through_blobs(path: Path) -> str:
    """The link text, from a snapshot file, that reaches `path` through a blobs/ folder linked to `/`."""
    return "../../blobs/" + str(path.resolve()).lstrip("/")


def no_secret_in(out: Path) -> bool:
    return not out.exists() or all(SECRET not in p.read_text(errors="ignore") for p in out.rglob("*") if p.is_file())


def test_convert_does_not_copy_a_file_through_blobs_linked_to_root(source, tmp_path, secret) -> None:
    snapshot = snapshot_of(source, tmp_path / "hub", "/")
    (snapshot / "vocab.txt").symlink_to(through_blobs(secret))
    out = tmp_path / "out"
    err = refused("convert", "--from-hf", str(snapshot), "--out", str(out))
    assert f"{snapshot / 'vocab.txt'} is refused" in err
    assert not (out / "vocab.txt").exists() and no_secret_in(out)


def test_generate_does_not_load_a_tokenizer_through_blobs_linked_to_root(source, tmp_path) -> None:
    snapshot = snapshot_of(source, tmp_path / "hub", "/")
    elsewhere = tmp_path / "elsewhere-tokenizer.json"
    shutil.move(snapshot / "tokenizer.json", elsewhere)
    (snapshot / "tokenizer.json").symlink_to(through_blobs(elsewhere))
    assert f"{snapshot / 'tokenizer.json'} is refused" in refused(*generate(snapshot))
    with pytest.raises(OutsideModelDir, match="tokenizer.json is refused"):
        pf.load_tokenizer(snapshot)


def test_blobs_linked_to_a_folder_inside_the_repository_is_not_trusted_either(tmp_path, secret) -> None:
    repo = tmp_path / "hub" / "models--a--b"
    (repo / "snapshots" / "r").mkdir(parents=True)
    (repo / "stash").mkdir()
    shutil.copy(secret, repo / "stash" / "blob")
    (repo / "blobs").symlink_to("stash")
    (repo / "snapshots" / "r" / "vocab.txt").symlink_to("../../blobs/blob")
    with pytest.raises(OutsideModelDir, match="vocab.txt is refused: it is a symlink to"):
        model_file(repo / "snapshots" / "r", "vocab.txt")


def test_a_real_blobs_folder_is_still_trusted(tmp_path, secret) -> None:
    repo = tmp_path / "hub" / "models--a--b"
    (repo / "snapshots" / "r").mkdir(parents=True)
    (repo / "blobs").mkdir()
    shutil.copy(secret, repo / "blobs" / "0123")
    (repo / "snapshots" / "r" / "vocab.txt").symlink_to("../../blobs/0123")
    assert model_file(repo / "snapshots" / "r", "vocab.txt").read_text() == SECRET


def test_a_symlinked_snapshots_folder_is_judged_where_it_leads(source, tmp_path, secret) -> None:
    """`models--a--b/snapshots` links to a folder outside any hub layout whose `../../blobs` is the secret's."""
    outside = tmp_path / "outside" / "x"
    shutil.copytree(source, outside / "r")
    (tmp_path / "outside" / "blobs").mkdir()
    shutil.copy(secret, tmp_path / "outside" / "blobs" / "0123")
    (outside / "r" / "vocab.txt").symlink_to("../../blobs/0123")
    repo = tmp_path / "hub" / "models--a--b"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots").symlink_to(outside)
    out = tmp_path / "out"
    err = refused("convert", "--from-hf", str(repo / "snapshots" / "r"), "--out", str(out))
    assert "vocab.txt is refused" in err and no_secret_in(out)
