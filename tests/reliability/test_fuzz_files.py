"""Fuzzing every kind of file posformer reads: damaged bytes (cut, flipped, replaced, appended) and well-formed
JSON/YAML with a node swapped for a wrong value (a hostile one among them: a lone surrogate, an integer of 5,000
digits, lists nested 100,000 deep). Each read must end in a working result or a `ValueError` / `FileNotFoundError`
that names the file; never a raw library exception (SafetensorError, UnpicklingError, KeyError, TypeError,
RecursionError...) or Python's own message without the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from checkpoint_fixtures import save_hf_llama, save_posformer, step_dir, train_tiny_run
from fuzz_profiles import fuzz
from hypothesis import given
from hypothesis import strategies as st

from posformer.config import Config
from posformer.data.squad import load_qa_file, squad_sample
from posformer.loading import load_model, load_text_tokenizer
from posformer.train.settings import load_run_settings

BIG_INT, DEEP = "__BIG_INT__", "__DEEP__"  # stand-ins, written into the dumped text by `hostile`
POISON = [None, True, 0, -1, 1.5, float("nan"), "", "x", [], {}, [None], {"a": None}, "../../etc/passwd", "/etc/passwd"]
POISON += ["\ud800", "a\udfffb", BIG_INT, DEEP]


def hostile(text: str) -> bytes:
    """Dumped JSON/YAML `text` with the stand-ins of POISON replaced by what no dumper writes: an integer of 5,000
    digits, lists nested 100,000 deep."""
    for stand_in, value in ((BIG_INT, "7" * 5000), (DEEP, "[" * 100_000 + "]" * 100_000)):
        text = text.replace(f'"{stand_in}"', value).replace(stand_in, value)
    return text.encode()


@st.composite
def byte_damage(draw, data: bytes) -> bytes:
    """`data` cut short, with bytes flipped, with a stretch replaced by random bytes, or with junk appended."""
    kind = draw(st.sampled_from(["cut", "flip", "replace", "append", "empty"]))
    if kind == "empty" or not data:
        return b""
    at = draw(st.integers(0, len(data) - 1))
    if kind == "cut":
        return data[:at]
    if kind == "append":
        return data + draw(st.binary(min_size=1, max_size=32))
    junk = draw(st.binary(min_size=1, max_size=16))
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
    return data[:at] + junk + data[at + len(junk) :]


def swap_node(value, path: list[int], poison):
    """`value` (parsed JSON/YAML) with the node that `path` leads to (each step picks a child) replaced by `poison`."""
    if not path or not isinstance(value, (dict, list)) or not value:
        return poison
    keys = list(value) if isinstance(value, dict) else list(range(len(value)))
    key = keys[path[0] % len(keys)]
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[key] = swap_node(value[key], path[1:], poison)
    return copy


@st.composite
def structure_damage(draw, value):
    path = draw(st.lists(st.integers(0, 50), max_size=5))
    return swap_node(value, path, draw(st.sampled_from(POISON)))


def assert_clean(read, *names: str) -> None:
    """`read()` works, or fails with ValueError / FileNotFoundError whose message names one of `names`."""
    try:
        read()
    except (ValueError, FileNotFoundError) as err:
        message = str(err)
        assert any(name in message for name in names), f"{type(err).__name__} names no file: {message}"


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz-sources")
    _, run = train_tiny_run(root / "train")
    return {
        "posformer": save_posformer(root / "posformer"),
        "hf": save_hf_llama(root / "hf"),
        "sharded": save_hf_llama(root / "sharded", max_shard_size="20KB"),
        "run_checkpoint": step_dir(run, 20),
    }


def damaged_copy(source: Path, target: Path, name: str, content: bytes) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    (target / name).write_bytes(content)
    return target


MODEL_FILES = [
    ("posformer", "config.json"),
    ("posformer", "model.safetensors"),
    ("posformer", "tokenizer.json"),
    ("hf", "config.json"),
    ("hf", "model.safetensors"),
    ("hf", "tokenizer.json"),
    ("hf", "tokenizer_config.json"),
    ("sharded", "model.safetensors.index.json"),
    ("run_checkpoint", "manifest.json"),
    ("run_checkpoint", "config.json"),
    ("run_checkpoint", "model.safetensors"),
]


@pytest.mark.parametrize("kind,name", MODEL_FILES, ids=[f"{k}-{n}" for k, n in MODEL_FILES])
@fuzz(12)
@given(data=st.data())
def test_damaged_model_directory_files(sources, tmp_path_factory, kind: str, name: str, data) -> None:
    source = sources[kind]
    original = (source / name).read_bytes()
    target = tmp_path_factory.mktemp("damaged") / kind
    if name.endswith(".json") and data.draw(st.booleans()):
        content = hostile(json.dumps(data.draw(structure_damage(json.loads(original)))))
    else:
        content = data.draw(byte_damage(original))
    damaged_copy(source, target, name, content)
    reader = load_text_tokenizer if name.startswith("tokenizer") else load_model
    assert_clean(lambda: reader(target), str(target))


RUN_CONFIG = {
    "model": {"preset": "llama", "d_model": 32, "n_layers": 1, "n_heads": 2},
    "data": {"seq_len": 16},
    "trainer": {"steps": 3, "lr": 1e-3, "betas": [0.9, 0.95]},
}


@fuzz(80)
@given(data=st.data())
def test_damaged_run_configs(tmp_path_factory, data) -> None:
    path = tmp_path_factory.mktemp("yaml") / "run.yaml"
    text = yaml.safe_dump(RUN_CONFIG).encode()
    if data.draw(st.booleans()):
        text = hostile(yaml.safe_dump(data.draw(structure_damage(RUN_CONFIG))))
    else:
        text = data.draw(byte_damage(text))
    path.write_bytes(text)
    assert_clean(lambda: load_run_settings(str(path)), str(path), "model", "data", "trainer")


@fuzz(60)
@given(data=st.data(), suffix=st.sampled_from([".json", ".yaml"]))
def test_damaged_config_files(tmp_path_factory, data, suffix: str) -> None:
    fields = Config(vocab_size=32, d_model=16, n_layers=1, n_heads=2).to_dict()
    path = tmp_path_factory.mktemp("config") / f"config{suffix}"
    dump = (lambda v: hostile(json.dumps(v))) if suffix == ".json" else (lambda v: hostile(yaml.safe_dump(v)))
    content = (
        dump(data.draw(structure_damage(fields))) if data.draw(st.booleans()) else data.draw(byte_damage(dump(fields)))
    )
    path.write_bytes(content)
    assert_clean(lambda: Config.load(path), str(path), "Config")


@fuzz(80)
@given(data=st.data())
def test_damaged_squad_files(tmp_path_factory, data) -> None:
    squad = json.loads(squad_sample().read_text(encoding="utf-8-sig"))
    squad["data"] = squad["data"][:1]
    squad["data"][0]["paragraphs"] = squad["data"][0]["paragraphs"][:2]
    path = tmp_path_factory.mktemp("squad") / "dev.json"
    content = (
        hostile(json.dumps(data.draw(structure_damage(squad))))
        if data.draw(st.booleans())
        else data.draw(byte_damage(json.dumps(squad).encode()))
    )
    path.write_bytes(content)
    for training in (True, False):
        assert_clean(lambda: load_qa_file(path, for_training=training), str(path))
