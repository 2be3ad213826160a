"""Files of the wrong kind, kept as cases for the next round (issue 58, items 2, 3, 6 and 7): every public loader
given, in place of each file it reads, a FIFO, a directory, a sparse giant (`os.truncate`: gigabytes that take no
disk), an empty file or a symlink leading outside; and a config.json asking for a model no machine holds. Each
must end in the documented exception (`ValueError`, `FileNotFoundError`) with one line naming the file or field,
quickly, with peak memory bounded (the process's peak resident size grows by less than `MEMORY_SLACK`), and the
CLI in exit 2 without a traceback."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from checkpoint_fixtures import cli, copy, refused, save_hf_llama, save_posformer, step_dir, train_tiny_run

import posformer as pf
from posformer.checkpoints.native import check_checkpoint
from posformer.data.documents import documents
from posformer.data.squad import load_qa_file
from posformer.data.text import CharTokenizer, read_utf8
from posformer.loading import load_config, load_model, load_text_tokenizer, load_tokenizer
from posformer.train.metrics_log import MetricsLog
from posformer.train.settings import load_run_settings
from posformer.utils.file_limits import CONFIG, DATA, LINE, TOKENIZER, FileTooLarge, read_limited

GiB = 1 << 30
MEMORY_SLACK = 512 * 2**20  # bytes the peak resident size may grow by while one case runs
SECONDS = 20  # the longest one case may take
KINDS = ["fifo", "directory", "sparse", "empty", "outside"]


def peak_bytes() -> int:
    """The process's peak resident size so far (ru_maxrss: kilobytes on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def fails_cleanly(read: Callable[[], object], *names: str, errors: tuple = (ValueError, FileNotFoundError)) -> str:
    """Run `read`, which must raise one of `errors` with a one-line message naming one of `names`, within
    `SECONDS` and `MEMORY_SLACK`; the message."""
    before, start = peak_bytes(), time.monotonic()
    with pytest.raises(errors) as caught:
        read()
    message = str(caught.value)
    assert time.monotonic() - start < SECONDS, f"took {time.monotonic() - start:.0f}s: {message}"
    assert peak_bytes() - before < MEMORY_SLACK, f"peak memory grew by {(peak_bytes() - before) >> 20} MiB"
    assert "\n" not in message.strip(), message
    assert any(name in message for name in names), f"{type(caught.value).__name__} names none of {names}: {message}"
    return message


def unblock(path: Path) -> None:
    """Open the FIFO at `path` for writing in a thread and close it, so that a reader that opened it by mistake
    reads an empty file instead of hanging the test."""

    def open_and_close() -> None:
        try:
            fd = os.open(path, os.O_WRONLY)
            os.close(fd)
        except OSError:
            pass

    threading.Thread(target=open_and_close, daemon=True).start()


def plant(path: Path, kind: str, outside: Path, size: int = 3 * GiB) -> None:
    """Replace the file at `path` by one of the wrong `kind` (`KINDS`)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
        unblock(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "sparse":  # gigabytes of zeros that take no disk space
        path.touch()
        os.truncate(path, size)
    elif kind == "empty":
        path.touch()
    else:
        outside.write_text('{"secret": true}')
        path.symlink_to(outside)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds-sources")
    _, run = train_tiny_run(root / "train")
    return {"posformer": save_posformer(root / "posformer"), "hf": save_hf_llama(root / "hf"), "run": run}


MODEL_FILES = [
    ("posformer", "config.json", load_model),
    ("posformer", "model.safetensors", load_model),
    ("posformer", "tokenizer.json", load_text_tokenizer),
    ("hf", "config.json", load_model),
    ("hf", "model.safetensors", load_model),
    ("hf", "tokenizer.json", load_tokenizer),
    ("hf", "tokenizer_config.json", load_tokenizer),
    ("checkpoint", "manifest.json", load_model),
    ("checkpoint", "config.json", load_model),
    ("checkpoint", "model.safetensors", load_model),
    ("checkpoint", "tokenizer.json", load_text_tokenizer),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("source,name,read", MODEL_FILES, ids=[f"{s}-{n}-{r.__name__}" for s, n, r in MODEL_FILES])
def test_a_model_file_of_the_wrong_kind_is_named(sources, tmp_path: Path, source: str, name: str, read, kind: str):
    origin = step_dir(sources["run"], 20) if source == "checkpoint" else sources[source]
    model = copy(origin, tmp_path / "model")
    plant(model / name, kind, tmp_path / "outside.json")
    fails_cleanly(lambda: read(model), str(model))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["manifest.json", "config.json", "model.safetensors"])
def test_a_run_skips_a_newest_checkpoint_with_a_wrong_kind_of_file(sources, tmp_path: Path, name: str, kind: str):
    run = copy(sources["run"], tmp_path / "run")
    plant(step_dir(run, 20) / name, kind, tmp_path / "outside.json")
    before = peak_bytes()
    model, folder = pf.loading.load_from(run)
    assert folder == step_dir(run, 10) and isinstance(model, pf.Transformer)
    assert peak_bytes() - before < MEMORY_SLACK
    shutil.rmtree(step_dir(run, 10))
    fails_cleanly(lambda: load_model(run), str(run))


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_manifest_that_is_no_regular_file_is_an_error_both_ways_in(sources, tmp_path: Path, kind: str) -> None:
    run = copy(sources["run"], tmp_path / "run")
    checkpoint = step_dir(run, 20)
    plant(checkpoint / "manifest.json", kind, tmp_path / "outside.json")
    said = fails_cleanly(lambda: load_model(checkpoint), "manifest.json")
    assert "is not a regular file but a" in said and "no manifest" not in said, said
    assert pf.loading.load_from(run)[1] == step_dir(run, 10)  # through the run: refused, the previous one loads
    said = refused("generate", "--model", str(checkpoint), "--prompt", "ab", "--max-new-tokens", "1")
    assert f"{checkpoint / 'manifest.json'} is not a regular file" in said


def set_config(model: Path, **fields: object) -> Path:
    """`model` (a posformer checkpoint) with `fields` of its config.json changed."""
    config = json.loads((model / "config.json").read_text())
    config["posformer"].update(fields)
    (model / "config.json").write_text(json.dumps(config))
    return model


HUGE = [("d_model", 2**30), ("d_ff", 2**31 - 1), ("n_layers", 10**6), ("vocab_size", 2**30), ("max_positions", 2**30)]


@pytest.mark.parametrize("field,value", HUGE)
def test_a_config_asking_for_a_huge_model_is_refused_before_allocation(sources, tmp_path, field: str, value: int):
    model = set_config(copy(sources["posformer"], tmp_path / "model"), **{field: value})
    config = str(model / "config.json")
    for read in (load_model, load_config, check_checkpoint, lambda m: pf.loading.load_from(m, changes={"dropout": 0})):
        said = fails_cleanly(lambda: read(model), config)
        assert f"Config.{field}={value} is invalid: expected an integer in [1, " in said, said
    said = refused("info", str(model))
    assert config in said and f"Config.{field}={value} is invalid" in said and "overflow" not in said, said


def test_a_config_that_disagrees_with_its_weights_allocates_nothing(sources, tmp_path: Path) -> None:
    """d_model 16,384 with the weights of d_model 16: refused from the weights' header, before the 4 GB model."""
    model = set_config(copy(sources["posformer"], tmp_path / "model"), d_model=16384, d_ff=65536)
    said = fails_cleanly(lambda: load_model(model), str(model / "model.safetensors"))
    assert "does not hold the weights of the model its config.json describes" in said


@pytest.mark.parametrize("key,value", [("hidden_size", 2**30), ("num_hidden_layers", 10**6)])
def test_a_hugging_face_config_asking_for_a_huge_model_is_refused(sources, tmp_path, key: str, value: int) -> None:
    model = copy(sources["hf"], tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, key: value}))
    for read in (load_model, load_config):
        said = fails_cleanly(lambda: read(model), str(model / "config.json"))
        assert f"={value} is invalid: expected an integer in [1, " in said, said


def test_info_refuses_a_config_file_asking_for_a_huge_model(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    pf.Config(vocab_size=32, d_model=16, n_layers=1, n_heads=2).save(path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "n_layers": 10**6}))
    said = refused("info", "--config", str(path))
    assert f"config file {path}: Config.n_layers=1000000 is invalid: expected an integer in [1, 1024]" in said


USER_FILES = {  # a reader of a file the user names -> the name of the file it must be given
    "Config.load": (lambda p: pf.Config.load(p), "config.json"),
    "run config": (lambda p: load_run_settings(str(p)), "run.yaml"),
    "QA data file": (lambda p: load_qa_file(p), "dev.json"),
    "QA data file (JSON lines)": (lambda p: load_qa_file(p), "dev.jsonl"),
    "CharTokenizer.load": (lambda p: CharTokenizer.load(p), "tokenizer.json"),
    "text document": (lambda p: list(documents([p])), "book.txt"),
    "JSON Lines documents": (lambda p: list(documents([p])), "web.jsonl"),
    "--context-file": (lambda p: read_utf8(p, f"--context-file {p}"), "context.txt"),
    "metrics log": (lambda p: MetricsLog(p).records(), "metrics.jsonl"),
}


@pytest.mark.parametrize("reader", list(USER_FILES))
def test_a_sparse_giant_user_file_is_refused_by_its_limit(tmp_path: Path, reader: str) -> None:
    read, name = USER_FILES[reader]
    path = tmp_path / name
    plant(path, "sparse", tmp_path / "outside.json", size=2 * GiB + 1)
    said = fails_cleanly(lambda: read(path), str(path))
    assert "too large" in said and "limit" in said, said


@pytest.mark.parametrize("limit", [CONFIG, TOKENIZER, DATA, LINE])
def test_read_limited_reads_up_to_its_limit_and_no_further(tmp_path: Path, limit) -> None:
    path = tmp_path / "file"
    path.touch()
    os.truncate(path, min(limit.bytes, 2**20))
    assert len(read_limited(path, "file", limit)) == min(limit.bytes, 2**20)
    os.truncate(path, limit.bytes + 1)
    with pytest.raises(FileTooLarge, match=rf"^file is too large: {limit.bytes + 1:,} bytes, over the .* limit of "):
        read_limited(path, "file", limit)


def test_a_giant_line_of_json_lines_is_refused_a_line_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "web.jsonl"
    path.write_bytes(b'{"text": "short"}\n')
    with path.open("ab") as f:
        f.truncate(LINE.bytes * 4)  # a second line of zeros, four times the limit
    said = fails_cleanly(lambda: list(documents([path])), str(path))
    assert "line 2 is too large" in said


BLANK = ["", " ", "\t"]


@pytest.mark.parametrize("blank", BLANK)
def test_an_empty_path_is_an_error_everywhere(tmp_path: Path, monkeypatch, blank: str) -> None:
    save_posformer(tmp_path)  # a checkpoint in the current directory, which an empty path must not stand for
    monkeypatch.chdir(tmp_path)
    readers = [
        pf.load,
        pf.Transformer.from_pretrained,
        pf.load_tokenizer,
        load_config,
        load_text_tokenizer,
        pf.from_hf,
        CharTokenizer.load,
        lambda p: pf.Config.load(p),
        lambda p: load_run_settings(p),
        lambda p: read_limited(p, "file", CONFIG),
        lambda p: list(documents([p])),
        lambda p: load_qa_file(p),
    ]
    for read in readers:
        fails_cleanly(lambda: read(blank), "the path is empty", "expected a .json, .yaml or .yml suffix")
    model = pf.load(tmp_path)
    with pytest.raises(ValueError, match="the path is empty"):
        model.save_pretrained(blank)


EMPTY_PATH_COMMANDS = [
    ["info", ""],
    ["info", "--config", " "],
    ["generate", "--model", "", "--prompt", "a"],
    ["convert", "--from-hf", "", "--out", "out"],
    ["train", "--config", "", "--output-dir", "out"],
    ["train", "--output-dir", "", "--set", "trainer.steps=1"],
]


@pytest.mark.parametrize("argv", EMPTY_PATH_COMMANDS, ids=[" ".join(map(repr, a)) for a in EMPTY_PATH_COMMANDS])
def test_the_cli_refuses_an_empty_path(tmp_path: Path, monkeypatch, argv: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    status, _, err = cli(*argv)
    assert status == 2 and "Traceback" not in err and "the path is empty" in err, err
    assert list(tmp_path.iterdir()) == [], "nothing is written into the current directory"


@pytest.mark.parametrize("kind", ["sparse", "empty", "fifo", "directory"])
@pytest.mark.parametrize("name", ["rows.json", "rows.parquet"])
def test_a_datasets_file_of_the_wrong_kind_is_named(tmp_path: Path, name: str, kind: str) -> None:
    pytest.importorskip("datasets")
    path = tmp_path / name
    plant(path, kind, tmp_path / "outside.json", size=2 * GiB)
    texts: list[str] = []
    try:
        texts = list(documents([path]))
    except (ValueError, FileNotFoundError):
        fails_cleanly(lambda: list(documents([path])), str(path))
    assert kind == "empty" or not texts
