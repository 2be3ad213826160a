"""The one loader's guarantees: a run directory's weights are read without its optimizer state, each file hashed
once; a path that exists nowhere is refused at once, without the network; the model's save and load are its own
(no class patching)."""

from __future__ import annotations

import builtins
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

import posformer as pf
from posformer.checkpoints import manifest
from posformer.checkpoints.native import config_json
from posformer.hf import hf_checkpoint
from posformer.train.training_checkpoint import STATE_FILE, CheckpointManager
from tests.conftest import tiny


def _run(root: Path, steps: tuple[int, ...] = (10, 20)) -> tuple[Path, pf.Transformer]:
    """A run directory with a checkpoint per step, written by the trainer's checkpoint writer; its trainer state
    is a large tensor (the loader must never read it)."""
    model = pf.Transformer(tiny("decoder")).eval()
    manager = CheckpointManager(root, keep_last=len(steps))
    for step in steps:
        manager.save(step, model, config_json(model.cfg), {"step": step, "padding": torch.zeros(50_000)})
    return root, model


def test_loading_a_run_never_opens_its_optimizer_state_and_hashes_each_file_once(tmp_path, monkeypatch) -> None:
    run, model = _run(tmp_path / "run")
    opened, hashed = [], Counter()
    real_open, real_sha256 = builtins.open, manifest.sha256

    def recording_open(file, *args, **kwargs):
        opened.append(Path(str(file)).name)
        return real_open(file, *args, **kwargs)

    def counting_sha256(path: Path) -> str:
        hashed[Path(path).name] += 1
        return real_sha256(path)

    monkeypatch.setattr(builtins, "open", recording_open)
    monkeypatch.setattr(manifest, "sha256", counting_sha256)
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called: the optimizer state"))
    loaded = pf.load(run)
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=0)
    assert STATE_FILE not in opened and STATE_FILE not in hashed
    assert hashed == Counter({"config.json": 1, "model.safetensors": 1})


def test_a_run_whose_newest_optimizer_state_is_damaged_still_gives_its_newest_weights(tmp_path) -> None:
    """The trainer state is --resume's to check; loading the weights neither reads nor verifies it."""
    run, _ = _run(tmp_path / "run")
    state = run / "checkpoints" / "step-00000020" / STATE_FILE
    state.write_bytes(state.read_bytes()[:100])
    assert pf.load(run) is not None
    with pytest.raises(manifest.CorruptCheckpoint, match=f"{STATE_FILE} has 100 bytes"):
        pf.load(state.parent)  # a checkpoint folder named itself is checked whole


@pytest.fixture
def no_network(monkeypatch):
    monkeypatch.setattr(hf_checkpoint, "download", lambda hub_id: pytest.fail(f"{hub_id} was looked up on the Hub"))


@pytest.mark.parametrize("name", ["missing-model", "runs/demo/checkpoints", "./org/name", "/no/such/dir"])
def test_a_path_that_is_no_hub_id_is_refused_at_once_without_the_network(tmp_path, monkeypatch, no_network, name):
    monkeypatch.chdir(tmp_path)
    for load in (pf.load, pf.Transformer.from_pretrained, pf.load_tokenizer):
        with pytest.raises(hf_checkpoint.MissingCheckpoint, match=f"no such file or directory: {name}"):
            load(name)


def test_a_missing_org_name_says_it_is_not_here_and_why_the_hub_failed(tmp_path, monkeypatch) -> None:
    def offline(hub_id: str) -> Path:
        raise OSError(f"offline: cannot reach the Hub for {hub_id}")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hf_checkpoint, "download", offline)
    with pytest.raises(hf_checkpoint.MissingCheckpoint) as caught:
        pf.load("some-org/some-model")
    said = str(caught.value)
    assert "no such file or directory: some-org/some-model" in said
    assert "could not be downloaded from the Hugging Face Hub (OSError: offline: cannot reach the Hub" in said


def test_an_org_name_that_exists_locally_is_read_from_disk(tmp_path, monkeypatch, no_network) -> None:
    monkeypatch.chdir(tmp_path)
    model = pf.Transformer(tiny("decoder"))
    model.save_pretrained(tmp_path / "org" / "name")
    assert pf.load("org/name").config == model.config


def test_save_and_load_are_the_models_own_not_patched_on(tmp_path) -> None:
    from posformer.model import Transformer

    assert not hasattr(Transformer, "saver") and not hasattr(Transformer, "loader")
    written = Transformer(tiny("decoder")).save_pretrained(tmp_path / "model")
    assert Transformer.from_pretrained(written).config == pf.load(written).config


def test_a_run_checkpoint_without_its_manifest_is_skipped_with_a_warning(tmp_path, caplog) -> None:
    from posformer.loading import load_from

    run, _ = _run(tmp_path / "run")
    (run / "checkpoints" / "step-00000020" / "manifest.json").unlink()
    assert load_from(run)[1].name == "step-00000010"
    assert any("step-00000020 is unusable" in r.message and "no manifest.json" in r.message for r in caplog.records)


def test_the_qa_loader_follows_the_same_rule(tmp_path, monkeypatch, no_network) -> None:
    from posformer.tasks.qa.models import load_qa_model

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"^--model nope does not exist \(no such file or directory: nope\)"):
        load_qa_model("nope", None)


def test_a_model_dir_saved_without_its_tokenizer_says_so_and_how_to_write_one(tmp_path: Path) -> None:
    """Not transformers' "Unrecognized model ... should have a `model_type` key" and its list of model types."""
    pf.Transformer(pf.Config(arch="decoder", vocab_size=50, d_model=16, n_layers=1, n_heads=2)).save_pretrained(
        tmp_path
    )
    expected = (
        rf"^{re.escape(str(tmp_path))} holds no tokenizer files \(tokenizer.json, vocab.txt, spiece.model, ...\): "
    )
    with pytest.raises(ValueError, match=expected + r"save the tokenizer beside the model, model.save_pretrained"):
        pf.load_tokenizer(tmp_path)
