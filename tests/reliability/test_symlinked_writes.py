"""Nothing posformer writes follows a symlink out of the directory it was given (`posformer.utils.safe_write`).

Each test plants a symlink at a path a command writes, pointing to a file or folder outside the directory, runs
the command, and checks that the outside is as it was: the link was replaced by the command's own file, or the
command stopped with exit 2 and one line naming the path. Also: a lock file that is a FIFO, `convert --out` that
names a file, and stale shards beside `save_pretrained`'s new weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
import torch
import yaml
from checkpoint_fixtures import cli, save_hf_llama, save_posformer, save_tokenizer

import posformer as pf
from posformer.data.catalog import DATASETS
from posformer.data.sources import Dataset, Download
from posformer.train.run_lock import LOCK_FILE, check_output_dir
from posformer.utils.safe_write import (
    WriteRefused,
    make_dirs,
    open_append,
    open_for_update,
    write_json_set_atomic,
    write_text_atomic,
)
from train_helpers import tiny_run, write_corpus

SECRET = "outside the directory: must stay as it is\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every output directory, holding `secret.txt`; `unchanged(outside)` checks it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    return folder


def unchanged(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET


def plant(path: Path, target: Path) -> Path:
    """A symlink at `path` (its folders created) to `target`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def replaced(path: Path) -> bool:
    """Whether `path` is now a regular file or folder of its own (the link replaced)."""
    return not path.is_symlink() and path.exists()


def secret(outside: Path) -> Path:
    return outside / "secret.txt"


# the helper itself


def test_a_whole_file_write_replaces_a_link_and_never_writes_through_it(tmp_path: Path, outside: Path) -> None:
    link = plant(tmp_path / "out" / "notes.txt", secret(outside))
    write_text_atomic(link, "mine")
    assert replaced(link) and link.read_text() == "mine"
    plant(tmp_path / "set" / "a.json", secret(outside))
    write_json_set_atomic(tmp_path / "set", {"a.json": [1], "b.json": [2]})
    assert replaced(tmp_path / "set" / "a.json")
    unchanged(outside)


@pytest.mark.parametrize("opener", [open_append, open_for_update])
def test_a_file_opened_in_place_is_never_a_link_fifo_or_folder(tmp_path: Path, outside: Path, opener) -> None:
    link = plant(tmp_path / "link", secret(outside))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((link, "a symbolic link"), (fifo, "a FIFO"), (outside, "a directory")):
        with pytest.raises(WriteRefused, match=f"^{path} is {kind}; posformer writes nothing through it"):
            opener(path)
    unchanged(outside)


def test_folders_below_the_given_one_are_never_links(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    plant(root / "a", outside)
    with pytest.raises(WriteRefused, match=f"^{root / 'a'} is a symbolic link"):
        make_dirs(root / "a" / "b", root)
    (root / "file").write_text("x")
    with pytest.raises(WriteRefused, match=f"^{root / 'file'} is a file, not a directory"):
        make_dirs(root / "file")
    assert make_dirs(root / "c" / "d", root).is_dir()
    unchanged(outside)


# the run lock and `posformer train`


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_lock_file_that_is_a_link_or_a_fifo_is_refused(tmp_path: Path, outside: Path, kind: str) -> None:
    run = tmp_path / "run"
    lock = run / LOCK_FILE
    if kind == "symlink":
        plant(lock, secret(outside))
    else:
        run.mkdir()
        os.mkfifo(lock)
    what = "a symbolic link" if kind == "symlink" else "a FIFO"
    with pytest.raises(ValueError, match=f"output dir {run} is not writable: {lock} is {what}"):
        check_output_dir(run)
    unchanged(outside)


def train(tmp_path: Path, run: Path) -> tuple[int, str]:
    """`posformer train` for 10 steps into `run` (a checkpoint at step 10): (exit status, stderr)."""
    config = tmp_path / "config.yaml"
    if not config.exists():
        config.write_text(yaml.safe_dump(tiny_run(write_corpus(tmp_path / "text.txt"), 10)))
    status, _, err = cli("train", "--config", str(config), "--output-dir", str(run), "--no-progress")
    return status, err


def test_train_replaces_the_links_at_its_files(tmp_path: Path, outside: Path) -> None:
    run = tmp_path / "run"
    staging = plant(run / "checkpoints" / f".tmp-step-00000010-{os.getpid()}", outside)
    links = [plant(run / name, secret(outside)) for name in ("run_config.yaml", "loss.png")]
    status, err = train(tmp_path, run)
    assert status == 0, err
    assert all(replaced(link) for link in links) and not staging.exists()
    assert pf.load(run) is not None
    unchanged(outside)


@pytest.mark.parametrize("name", [LOCK_FILE, "metrics.jsonl", "checkpoints", "tensorboard"])
def test_train_never_writes_through_a_link(tmp_path: Path, outside: Path, name: str) -> None:
    run = tmp_path / "run"
    link = plant(run / name, outside if name in ("checkpoints", "tensorboard") else secret(outside))
    status, err = train(tmp_path, run)
    assert (status == 0 and replaced(link)) or (status == 2 and f"{link} is a symbolic link" in err), err
    assert "Traceback" not in err
    unchanged(outside)


# save_pretrained and convert


def test_save_pretrained_replaces_links_and_leaves_one_weights_layout(tmp_path: Path, outside: Path) -> None:
    source = save_hf_llama(tmp_path / "hf", max_shard_size="20KB")
    assert (source / "model.safetensors.index.json").is_file()
    out = tmp_path / "out"
    for name in os.listdir(source):  # an earlier save's files: shards, index, tokenizer
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_bytes((source / name).read_bytes())
    (out / "pytorch_model.bin").write_bytes(b"stale")
    (out / "config.json").unlink()
    links = [plant(out / name, secret(outside)) for name in ("config.json", "model.safetensors")]
    model = pf.load(source)
    tokenizer = save_tokenizer(tmp_path / "tok")
    (out / "tokenizer.json").unlink()
    links.append(plant(out / "tokenizer.json", secret(outside)))
    model.save_pretrained(out, tokenizer=tokenizer)
    assert all(replaced(link) for link in links)
    weights = sorted(p.name for p in out.iterdir() if "model" in p.name and "tokenizer" not in p.name)
    assert weights == ["model.safetensors"]
    torch.testing.assert_close(pf.load(out).state_dict(), model.state_dict())
    unchanged(outside)


@pytest.mark.parametrize("direction", ["--from-hf", "--to-hf"])
def test_convert_replaces_the_links_at_its_files(tmp_path: Path, outside: Path, direction: str) -> None:
    source = save_hf_llama(tmp_path / "hf") if direction == "--from-hf" else save_posformer(tmp_path / "native")
    out = tmp_path / "out"
    names = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    links = [plant(out / name, secret(outside)) for name in names]
    status, _, err = cli("convert", direction, str(source), "--out", str(out))
    assert status == 0, err
    assert all(replaced(link) for link in links)
    unchanged(outside)


def test_convert_out_naming_a_file_is_refused(tmp_path: Path) -> None:
    source = save_hf_llama(tmp_path / "hf")
    target = tmp_path / "file.txt"
    target.write_text(SECRET)
    status, _, err = cli("convert", "--from-hf", str(source), "--out", str(target))
    assert status == 2 and f"{target} is a file, not a directory" in err and "Traceback" not in err, err
    assert target.read_text() == SECRET


# tokenizer train, data fetch


def test_tokenizer_train_replaces_the_links_at_its_files(tmp_path: Path, outside: Path) -> None:
    out = tmp_path / "tok"
    links = [plant(out / name, secret(outside)) for name in ("tokenizer.json", "tokenizer_config.json")]
    data = write_corpus(tmp_path / "text.txt")
    status, _, err = cli("tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(out))
    assert status == 0, err
    assert all(replaced(link) for link in links)
    unchanged(outside)


FILES = {"a.txt": b"first file\n", "b.txt": b"second file\n"}
NAME = "wikitext-2"  # a name the command line takes; its catalog entry is replaced


@pytest.fixture
def dataset(tmp_path: Path, monkeypatch) -> Path:
    """A dataset of FILES under a catalog name in the catalog; returns a local mirror of it."""
    files = tuple(
        Download(n, f"https://example.invalid/{n}", len(c), hashlib.sha256(c).hexdigest(), "a test")
        for n, c in FILES.items()
    )
    monkeypatch.setitem(DATASETS, NAME, Dataset(NAME, "Tiny", "Two files.", "CC0", "the tests", files))
    mirror = tmp_path / "mirror"
    (mirror / NAME).mkdir(parents=True)
    for name, content in FILES.items():
        (mirror / NAME / name).write_bytes(content)
    return mirror


def fetch(to: Path, mirror: Path) -> tuple[int, str]:
    status, _, err = cli("data", "fetch", NAME, "--to", str(to), "--mirror", str(mirror), "--no-progress")
    return status, err


def test_data_fetch_replaces_the_links_at_its_files(tmp_path: Path, outside: Path, dataset: Path) -> None:
    folder = tmp_path / "data" / NAME
    links = [plant(folder / name, secret(outside)) for name in ("a.txt", "SOURCE.md")]
    status, err = fetch(tmp_path / "data", dataset)
    assert status == 0, err
    assert all(replaced(link) for link in links) and (folder / "a.txt").read_bytes() == FILES["a.txt"]
    unchanged(outside)


def test_data_fetch_into_a_linked_dataset_folder_is_refused(tmp_path: Path, outside: Path, dataset: Path) -> None:
    link = plant(tmp_path / "data" / NAME, outside)
    status, err = fetch(tmp_path / "data", dataset)
    assert status == 2 and f"{link} is a symbolic link" in err and "Traceback" not in err, err
    unchanged(outside)


def test_a_failed_fetch_leaves_no_partial_file(tmp_path: Path, dataset: Path) -> None:
    (dataset / NAME / "b.txt").write_bytes(b"not the recorded file\n")
    status, err = fetch(tmp_path / "data", dataset)
    assert status == 2 and "b.txt" in err, err
    folder = tmp_path / "data" / NAME
    assert sorted(p.name for p in folder.iterdir()) == ["a.txt"]
    assert stat.S_ISREG((folder / "a.txt").lstat().st_mode)


# figures drawn from recorded results


def task_results(task: str) -> dict:
    """A results.json of a task run at train_len 8, evaluated at 8 and 16."""
    config = {"task": task, "train_len": 8, "eval_lens": [8, 16], "steps": 1, "batch_size": 1, "d_model": 8}
    config |= {"layers": 1, "heads": 1, "eval_examples": 1}
    rows = {row: {"error": None, "accuracy": {"8": 1.0, "16": 0.5}} for row in ("none", "rope")}
    return {"benchmark": "tasks", "config": config, "rows": rows}


def test_plot_replaces_the_links_at_its_figures(tmp_path: Path, outside: Path) -> None:
    runs = []
    for task in ("copy", "sort"):
        (tmp_path / task).mkdir()
        (tmp_path / task / "results.json").write_text(json.dumps(task_results(task)))
        runs.append(str(tmp_path / task))
    out = tmp_path / "figs"
    names = ("copy-accuracy.png", "sort-accuracy.png", "tasks-summary.png")
    links = [plant(out / name, secret(outside)) for name in names]
    status, _, err = cli("plot", "--output-dir", str(out), "--results", *runs)
    assert status == 0, err
    assert all(replaced(link) for link in links)
    unchanged(outside)


@pytest.mark.parametrize("linked", ["rows", "rows/rope"])
def test_an_experiment_never_trains_a_row_through_a_link(tmp_path: Path, outside: Path, linked: str) -> None:
    out = tmp_path / "copy"
    link = plant(out / linked, outside)
    argv = ("extrapolate", "--task", "copy", "--output-dir", str(out), "--positions", "rope", "--no-progress")
    status, _, err = cli(*argv)
    assert status == 2 and f"{link} is a symbolic link" in err and "Traceback" not in err, err
    unchanged(outside)
