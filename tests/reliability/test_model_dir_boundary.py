"""Family 5: nothing outside a model directory is read through it, and its malformed files are clean errors.

Tokenizer files that are symlinks to a secret file are refused (never copied by `convert`), shard indexes
may not name files outside the directory, and a malformed config, shard index or tokenizer file is a
`ValueError` naming it (the CLI: `posformer CMD: error: ...`, exit status 2).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from checkpoint_fixtures import cli, copy, generate, refused, save_hf_llama, save_posformer

import posformer as pf
from posformer.hf import CheckpointError

SECRET = "TOP SECRET"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "posformer": save_posformer(root / "posformer"),
        "hf": save_hf_llama(root / "hf"),
        "sharded": save_hf_llama(root / "sharded", max_shard_size="20KB"),
        "bin": save_hf_llama(root / "bin", max_shard_size="20KB", safe_serialization=False),
    }


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


def no_secret_in(out: Path) -> bool:
    return not out.exists() or all(SECRET not in p.read_text(errors="ignore") for p in out.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "name", ["merges.txt", "tokenizer.json", "vocab.txt", "generation_config.json", "special_tokens_map.json"]
)
@pytest.mark.parametrize("direction", ["--from-hf", "--to-hf"])
def test_convert_refuses_a_tokenizer_file_linked_outside(models, tmp_path, secret, name: str, direction: str) -> None:
    model = copy(models["hf" if direction == "--from-hf" else "posformer"], tmp_path / "model")
    (model / name).unlink(missing_ok=True)
    (model / name).symlink_to(secret)
    out = tmp_path / "out"
    err = refused("convert", direction, str(model), "--out", str(out))
    assert f"{model / name} is refused: it is a symlink to {secret}" in err
    assert no_secret_in(out)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"])
def test_generate_refuses_any_model_file_linked_outside(models, tmp_path, name: str) -> None:
    model = copy(models["hf"], tmp_path / "model")
    outside = tmp_path / f"outside-{name}"
    (model / name).rename(outside)
    (model / name).symlink_to(outside)
    assert f"{model / name} is refused" in refused(*generate(model))


def _move_first_shard(model: Path, index_name: str, rename) -> str:
    index = json.loads((model / index_name).read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    shutil.move(model / first, model.parent / first)
    index["weight_map"] = {k: rename(model, v) if v == first else v for k, v in index["weight_map"].items()}
    (model / index_name).write_text(json.dumps(index))
    return first


@pytest.mark.parametrize(
    "kind,index_name", [("sharded", "model.safetensors.index.json"), ("bin", "pytorch_model.bin.index.json")]
)
@pytest.mark.parametrize("how", ["absolute", "dot-dot", "symlinked folder"])
def test_shards_outside_the_directory_are_refused(models, tmp_path, kind: str, index_name: str, how: str) -> None:
    model = copy(models[kind], tmp_path / "model")
    if how == "symlinked folder":
        (model / "shards").symlink_to(tmp_path)
    rename = {
        "absolute": lambda m, v: str(m.parent / v),
        "dot-dot": lambda m, v: f"../{v}",
        "symlinked folder": lambda m, v: f"shards/{v}",
    }[how]
    first = _move_first_shard(model, index_name, rename)
    with pytest.raises(ValueError, match=f"named in {model / index_name}.* is refused"):
        pf.from_hf(model)
    assert first in refused("convert", "--from-hf", str(model), "--out", str(tmp_path / "out"))


@pytest.mark.parametrize(
    "index",
    [
        '{"weight_map": ["a.safetensors"]}',
        '{"weight_map": {"a": 3}}',
        '{"weight_map": "model.safetensors"}',
        '{"metadata": {}}',
        "[1]",
        "{broken",
    ],
)
def test_a_malformed_shard_index_names_the_file(models, tmp_path, index: str) -> None:
    model = copy(models["sharded"], tmp_path / "model")
    (model / "model.safetensors.index.json").write_text(index)
    with pytest.raises(CheckpointError, match="model.safetensors.index.json"):
        pf.from_hf(model)
    assert "model.safetensors.index.json" in refused(*generate(model))


@pytest.mark.parametrize(
    "config,message",
    [
        ("[1, 2]", "must hold a JSON object, got list"),
        ("{broken", "is not valid JSON"),
        ('"text"', "must hold a JSON object, got str"),
        ('{"posformer": 3}', "'posformer' must be a JSON object"),
        ('{"posformer": {"d_model": "x"}}', "holds an invalid posformer config"),
    ],
)
def test_a_malformed_posformer_config_names_the_file(models, tmp_path, config: str, message: str) -> None:
    model = copy(models["posformer"], tmp_path / "model")
    (model / "config.json").write_text(config)
    for command in (generate(model), ["convert", "--to-hf", str(model), "--out", str(tmp_path / "out")]):
        err = refused(*command)
        assert str(model / "config.json") in err and message in err


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("tokenizer.json", "{corrupt", "tokenizer.json is not a valid tokenizer file"),
        ("tokenizer.json", '{"model": {"type": "BPE"}}', "tokenizer.json is not a valid tokenizer file"),
        ("tokenizer_config.json", "[1]", "tokenizer_config.json must hold a JSON object"),
        ("special_tokens_map.json", "{bad", "special_tokens_map.json is not valid JSON"),
    ],
)
def test_a_corrupt_tokenizer_file_names_the_file(models, tmp_path, name: str, content: str, message: str) -> None:
    model = copy(models["hf"], tmp_path / "model")
    (model / name).write_text(content)
    assert message in refused(*generate(model))
    with pytest.raises(ValueError, match=message):
        pf.load_tokenizer(model)


@pytest.mark.parametrize("key", ["tokenizer_file", "vocab_file", "merges_file"])
@pytest.mark.parametrize("where", ["absolute", "dot-dot"])
def test_tokenizer_config_may_not_name_a_file_outside(models, tmp_path, secret, key: str, where: str) -> None:
    model = copy(models["hf"], tmp_path / "model")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config[key] = str(secret) if where == "absolute" else "../secret.txt"
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    assert f"{key}=" in refused(*generate(model))


def test_a_stale_absolute_tokenizer_file_of_the_saving_machine_still_loads(models, tmp_path) -> None:
    model = copy(models["hf"], tmp_path / "model")
    config = json.loads((model / "tokenizer_config.json").read_text())
    # old Hub files hold the absolute path of the machine that saved them, a path that does not exist here
    config["tokenizer_file"] = str(tmp_path / "saving-machine" / "snapshot" / "tokenizer.json")
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = pf.load_tokenizer(model)
    assert tokenizer.decode(tokenizer("the cat")["input_ids"]) == "the cat"
    assert cli(*generate(model))[0] == 0
