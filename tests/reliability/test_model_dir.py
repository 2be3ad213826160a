"""`posformer.checkpoints.model_dir`: a model directory is a boundary, and the Hugging Face hub cache still loads."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch
from checkpoint_fixtures import PROMPT, cli, generate, save_hf_llama
from transformers import LlamaForCausalLM

import posformer as pf
from hf_oracle import assert_same_outputs, padded_batch
from posformer.checkpoints.model_dir import OutsideModelDir, model_file, read_json
from posformer.checkpoints.native import load_pretrained


@pytest.mark.parametrize("name", ["/etc/passwd", "../secret", "sub/../../secret", "..", "", "C:\\secret", "..\\secret"])
def test_absolute_names_and_dot_dot_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(OutsideModelDir, match="is refused"):
        model_file(tmp_path, name)


def test_a_symlink_leading_outside_is_refused_one_inside_is_not(tmp_path: Path) -> None:
    model, secret = tmp_path / "model", tmp_path / "secret.txt"
    (model / "sub").mkdir(parents=True)
    secret.write_text("secret")
    (model / "real.txt").write_text("mine")
    (model / "leak.txt").symlink_to(secret)
    (model / "alias.txt").symlink_to("real.txt")
    (model / "outside").symlink_to(tmp_path)
    assert model_file(model, "alias.txt").read_text() == "mine"
    assert model_file(model, "sub/absent.txt") == model / "sub" / "absent.txt"  # need not exist
    for name in ("leak.txt", "outside/secret.txt"):
        with pytest.raises(OutsideModelDir, match=f"{name} is refused: it is a symlink to .*secret.txt, outside"):
            model_file(model, name)
    with pytest.raises(ValueError, match=r"named in index.json"):
        model_file(model, "../secret.txt", source="index.json")


def test_read_json_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[1]")
    (tmp_path / "b.json").write_bytes(b"\xff{")
    with pytest.raises(ValueError, match=r"a.json must hold a JSON object, got list"):
        read_json(tmp_path, "a.json")
    with pytest.raises(ValueError, match=r"b.json is not valid JSON"):
        read_json(tmp_path, "b.json")
    with pytest.raises(FileNotFoundError, match=r"c.json does not exist"):
        read_json(tmp_path, "c.json")


def hub_cache(source: Path, cache: Path, repo: str = "models--org--tiny") -> Path:
    """The hub cache layout of `source`: every file a blob, the snapshot's files relative symlinks to them."""
    snapshot = cache / repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (cache / repo / "blobs").mkdir()
    for file in source.iterdir():
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        (cache / repo / "blobs" / digest).write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / digest)
    return snapshot


def test_the_hub_cache_layout_with_in_repo_symlinks_loads(tmp_path: Path) -> None:
    source = save_hf_llama(tmp_path / "source")
    snapshot = hub_cache(source, tmp_path / "hub")
    assert all(p.is_symlink() for p in snapshot.iterdir())
    model = pf.from_hf(snapshot)
    reference = LlamaForCausalLM.from_pretrained(source).eval()
    assert_same_outputs(model, reference, padded_batch(97))
    tokenizer = pf.load_tokenizer(snapshot)
    assert tokenizer.decode(tokenizer(PROMPT)["input_ids"]) == PROMPT
    status, out, err = cli(*generate(snapshot))
    assert status == 0 and out.startswith(PROMPT), err
    status, _, err = cli("convert", "--from-hf", str(snapshot), "--out", str(tmp_path / "converted"))
    assert status == 0 and (tmp_path / "converted" / "tokenizer.json").is_file(), err
    torch.testing.assert_close(load_pretrained(tmp_path / "converted").state_dict(), model.state_dict())


def test_a_snapshot_symlink_into_another_repository_is_refused(tmp_path: Path) -> None:
    source = save_hf_llama(tmp_path / "source")
    snapshot = hub_cache(source, tmp_path / "hub")
    other = hub_cache(source, tmp_path / "hub", repo="models--evil--other")
    weights = snapshot / "model.safetensors"
    weights.unlink()
    weights.symlink_to(os.path.relpath((other / "model.safetensors").resolve(), snapshot))
    with pytest.raises(ValueError, match="model.safetensors is refused: it is a symlink"):
        pf.from_hf(snapshot)
