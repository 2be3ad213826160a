"""Family 4: a checkpoint is checked wherever it is loaded, not only on `--resume`.

A truncated or corrupt weights file is a clean error naming it, for posformer and Hugging Face checkpoints
alike; a directory holding a manifest.json (a training checkpoint) is verified against it by `generate`,
`convert`, `qa eval` and the library's loaders, and the error names the file that failed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from checkpoint_fixtures import copy, generate, refused, save_hf_llama, save_posformer, step_dir, train_tiny_run
from safetensors.torch import save_file

import posformer as pf
from posformer.checkpoints.manifest import CorruptCheckpoint
from posformer.checkpoints.native import load_pretrained, save_pretrained
from posformer.loading import load_model, load_text_tokenizer
from tiny_bert import TOKENIZER_FILES, save_tiny_bert
from train_helpers import flip_byte, truncate


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A posformer checkpoint, a Hugging Face one (sharded too), a training run and a span-QA checkpoint."""
    root = tmp_path_factory.mktemp("models")
    bert = save_tiny_bert(root / "bert")
    qa = save_pretrained(pf.from_hf(bert, head="span_qa"), root / "qa")
    for name in TOKENIZER_FILES:
        shutil.copyfile(bert / name, qa / name)
    (root / "qa.jsonl").write_text(
        json.dumps(
            {
                "id": "1",
                "context": "Paris is nice.",
                "question": "What is nice?",
                "answers": {"text": ["Paris"], "answer_start": [0]},
            }
        )
        + "\n"
    )
    return {
        "posformer": save_posformer(root / "posformer"),
        "hf": save_hf_llama(root / "hf"),
        "sharded": save_hf_llama(root / "sharded", max_shard_size="20KB"),
        "run": train_tiny_run(root)[1],
        "qa": qa,
        "qa_data": root / "qa.jsonl",
    }


def commands(models: dict[str, Path], model: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "generate": generate(model),
        "convert": ["convert", "--to-hf", str(model), "--out", str(tmp_path / "out")],
        "qa eval": [
            "qa",
            "eval",
            "--model",
            str(model),
            "--eval-file",
            str(models["qa_data"]),
            "--output-dir",
            str(tmp_path / "eval"),
            "--max-seq-length",
            "64",
            "--doc-stride",
            "16",
        ],
    }


@pytest.mark.parametrize("command", ["generate", "convert", "qa eval"])
def test_truncated_posformer_weights_are_a_clean_error(models, tmp_path: Path, command: str) -> None:
    model = copy(models["qa" if command == "qa eval" else "posformer"], tmp_path / "model")
    truncate(model / "model.safetensors")
    err = refused(*commands(models, model, tmp_path)[command])
    assert f"{model / 'model.safetensors'} is truncated or corrupt" in err


@pytest.mark.parametrize("content", [b"", b"garbage", b"\xff" * 64])
def test_unreadable_posformer_weights_name_the_file(models, tmp_path: Path, content: bytes) -> None:
    model = copy(models["posformer"], tmp_path / "model")
    (model / "model.safetensors").write_bytes(content)
    with pytest.raises(ValueError, match="model.safetensors is truncated or corrupt"):
        load_pretrained(model)


def test_weights_of_another_model_name_the_tensors(models, tmp_path: Path) -> None:
    model = copy(models["posformer"], tmp_path / "model")
    from safetensors.torch import load_file

    state = load_file(model / "model.safetensors")
    state["extra"] = state.pop(sorted(state)[0])
    save_file(state, model / "model.safetensors")
    err = refused(*generate(model))
    assert "model.safetensors does not hold the weights" in err and "unknown tensors: extra" in err


@pytest.mark.parametrize("kind", ["hf", "sharded"])
def test_truncated_hugging_face_weights_are_a_clean_error(models, tmp_path: Path, kind: str) -> None:
    model = copy(models[kind], tmp_path / "model")
    weights = sorted(model.glob("*.safetensors"))[0]
    truncate(weights)
    assert f"{weights} is truncated or corrupt" in refused(*generate(model))
    assert f"{weights} is truncated or corrupt" in refused(
        "convert", "--from-hf", str(model), "--out", str(tmp_path / "out")
    )


@pytest.mark.parametrize("file", ["model.safetensors", "config.json", "tokenizer.json", "trainer_state.pt"])
@pytest.mark.parametrize("command", ["generate", "convert"])
def test_a_flipped_byte_in_a_training_checkpoint_is_caught_outside_resume(
    models, tmp_path: Path, file: str, command: str
) -> None:
    checkpoint = copy(step_dir(models["run"], 20), tmp_path / "checkpoint")
    flip_byte(checkpoint / file)
    err = refused(*commands(models, checkpoint, tmp_path)[command])
    assert f"{checkpoint / file} does not match its SHA-256 checksum" in err


def test_the_library_loaders_verify_the_manifest(models, tmp_path: Path) -> None:
    checkpoint = copy(step_dir(models["run"], 20), tmp_path / "checkpoint")
    load_model(checkpoint)  # intact: loads
    flip_byte(checkpoint / "model.safetensors")
    for load in (load_model, load_pretrained):
        with pytest.raises(CorruptCheckpoint, match="model.safetensors does not match its SHA-256"):
            load(checkpoint)
    (checkpoint / "tokenizer.json").write_text('{"type": "char", "chars": ["x"]}')
    with pytest.raises(CorruptCheckpoint, match="tokenizer.json has 32 bytes, the manifest says"):
        load_text_tokenizer(checkpoint)
    (checkpoint / "manifest.json").write_text("[1]")
    with pytest.raises(CorruptCheckpoint, match="manifest.json is unreadable"):
        load_pretrained(checkpoint)
    (checkpoint / "manifest.json").unlink()
    (checkpoint / "manifest.json").symlink_to(step_dir(models["run"], 20) / "manifest.json")
    with pytest.raises(ValueError, match="manifest.json is refused: it is a symlink"):
        load_pretrained(checkpoint)


def test_a_run_directory_skips_a_damaged_checkpoint_with_a_warning(models, tmp_path: Path, caplog) -> None:
    run = copy(models["run"], tmp_path / "run")
    flip_byte(step_dir(run, 20) / "model.safetensors")
    assert load_model(run).cfg.d_model == 32
    assert any(
        f"checkpoint {step_dir(run, 20)} is unusable" in r.message and "SHA-256" in r.message for r in caplog.records
    )
    flip_byte(step_dir(run, 10) / "config.json")
    assert f"{run}/checkpoints holds no valid checkpoint" in refused(*generate(run))
