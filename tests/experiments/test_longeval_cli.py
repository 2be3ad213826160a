"""`posformer longeval` end to end on a tiny random posformer model saved with a byte-level BPE tokenizer: the
results files, determinism under a seed, and a clear error (exit status 2, the culprit named) for a bad task,
length, depth or reference length, a length a task cannot fit and a length past learned positions."""

from __future__ import annotations

import json

import pytest

import posformer as pf
from posformer.checkpoints.native import save_pretrained
from posformer.cli import main
from posformer.data.text import default_corpus
from posformer.experiments import corpus
from posformer.experiments.corpus import HELD_OUT_BOOKS
from posformer.utils.tokenizer_config import saved_tokenizer_files

TASKS = "single_noise,multikey,vt,cwe"
ARGS = ["--lengths", "256,512", "--tasks", TASKS, "--depths", "0,1", "--trials", "2", "--no-progress"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(the rope model's directory, a learned-positions model's directory, a data dir of tiny held-out books)."""
    root = tmp_path_factory.mktemp("longeval")
    text = default_corpus().read_text(encoding="utf-8")
    tokenizer = corpus.train_bpe({"shakespeare": text}, vocab_size=400, max_chars=100_000)
    files = saved_tokenizer_files(tokenizer)
    for name, position in (("rope", "rope"), ("learned", "learned")):
        cfg = pf.Config(
            arch="decoder",
            vocab_size=len(tokenizer),
            d_model=16,
            n_layers=1,
            n_heads=2,
            position=position,
            max_positions=256,
        )
        save_pretrained(pf.Transformer(cfg), root / name, files)
    books = root / "data" / "gutenberg"
    books.mkdir(parents=True)
    for name in HELD_OUT_BOOKS:
        (books / name).write_text(f"*** START OF IT ***\n{text[:20_000]}\n*** END OF IT ***\n")
    return root / "rope", root / "learned", root / "data"


def test_longeval_writes_the_grid_and_the_report_and_a_seed_fixes_them(saved, tmp_path, capsys):
    rope, _, data_dir = saved
    assert main(["longeval", str(rope), *ARGS, "--data-dir", str(data_dir), "--output-dir", str(tmp_path / "a")]) == 0
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    assert list(results["grid"]) == TASKS.split(",") and results["config"]["lengths"] == [256, 512]
    assert set(results["grid"]["multikey"]["512"]) == {"0.0", "1.0"} and set(results["grid"]["cwe"]["256"]) == {"any"}
    cell = results["grid"]["multikey"]["256"]["1.0"]
    assert set(cell) == {"exact", "tokens", "chance"} and cell["chance"] == 0.25
    assert set(results["means"]) == {"256", "512"} and results["chance"]["vt"] == {"256": 1 / 120, "512": 1 / 120}
    found = results["effective_length"]
    assert found["threshold"] == 0.856 and found["reference_length"] is None and "RULER" in found["rule"]
    assert results["model"]["position"] == "rope" and results["haystack_tokens"] > 512
    report = (tmp_path / "a" / "results.md").read_text()
    assert "| task \\ length | 256 | 512 | chance |" in report and "Effective length:" in report
    assert "## multikey: exact match / answer tokens right, by depth" in report and "## vt" not in report
    assert "Effective length:" in capsys.readouterr().out
    again = [*ARGS[:2], "--tasks", "multikey", *ARGS[4:], "--data-dir", str(data_dir)]
    assert main(["longeval", str(rope), *again, "--output-dir", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "results.json").read_text())["grid"]["multikey"] == results["grid"]["multikey"]


def test_a_reference_length_makes_the_threshold_relative(saved, tmp_path):
    rope, _, _ = saved
    args = [*ARGS[:2], "--tasks", "vt", "--trials", "1", "--no-progress", "--reference-length", "256"]
    assert main(["longeval", str(rope), *args, "--threshold", "0.5", "--output-dir", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    found = results["effective_length"]
    assert found["reference_length"] == 256 and found["threshold"] == pytest.approx(0.5 * results["means"]["256"])


@pytest.mark.parametrize(
    "change, message",
    [
        (["--tasks", "vt,needle"], "'needle' is not one of single_noise"),
        (["--depths", "0.5,1.5"], "1.5 is not a number in [0, 1]"),
        (["--lengths", "256,3q"], "length '3q' is not a length"),
        (["--lengths", "32,256"], "task 'single_noise' needs prompts of at least"),
        (["--reference-length", "128"], "--reference-length 128 is not among --lengths [256, 512]"),
        (["--data-dir", "/nowhere"], "give --data-dir (the folder holding gutenberg/)"),
    ],
)
def test_bad_input_is_refused_naming_it(saved, tmp_path, capsys, change, message):
    rope, _, _ = saved
    args = list(ARGS)
    for flag, value in zip(change[::2], change[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    try:
        status = main(["longeval", str(rope), *args, "--output-dir", str(tmp_path)])
    except SystemExit as stop:  # argparse refuses a bad task or depth while parsing
        status = stop.code
    assert status == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()


def test_a_length_past_learned_positions_is_refused(saved, tmp_path, capsys):
    _, learned, _ = saved
    assert main(["longeval", str(learned), *ARGS[:2], "--tasks", "vt", "--output-dir", str(tmp_path)]) == 2
    assert "'learned' positions, which stop at 256 tokens" in capsys.readouterr().err


def test_a_missing_model_is_named(tmp_path, capsys):
    assert main(["longeval", str(tmp_path / "none"), *ARGS[:2], "--output-dir", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'none'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
