"""`posformer extend` end to end on a tiny extrapolate row: every row written, only the fine-tune changing the
weights, reruns, eval-time-only scaling, named errors, a text file, `posformer plot`, and the LongRoPE recipe
(progressive stages, short factor readjustment). The building blocks: test_extend.py."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch

import posformer as pf
from posformer.checkpoints.native import save_pretrained
from posformer.cli import main
from posformer.data.text import default_corpus
from posformer.experiments.extension.methods import PIECEWISE, position_of
from posformer.loading import checkpoint_dir, load_model, tokenizer_paths

ROW = [
    "--preset",
    "quick",
    "--positions",
    "rope",
    "--train-len",
    "16",
    "--eval-lens",
    "16,32",
    "--steps",
    "3",
    "--d-model",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--vocab-size",
    "300",
    "--eval-tokens",
    "256",
    "--tokenizer-chars",
    "20000",
    "--no-progress",
    "--set",
    "train_chars=40000",
    "--set",
    "batch_size=4",
]
EXTEND = [
    "--preset",
    "quick",
    "--target-len",
    "64",
    "--steps",
    "2",
    "--no-progress",
    "--set",
    "eval_tokens=1024",
    "--set",
    "passkey_trials=2",
    "--set",
    "longrope_tokens=256",
    "--set",
    "longrope_generations=1",
]


def _digest(folder) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.safetensors")))).hexdigest()


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    root = tmp_path_factory.mktemp("extend")
    assert main(["extrapolate", *ROW, "--output-dir", str(root / "lm")]) == 0
    source = root / "lm" / "rows" / "rope"
    before = _digest(source)
    assert (
        main(["extend", str(source), *EXTEND, "--methods", "none,pi,longrope", "--output-dir", str(root / "ext")]) == 0
    )
    assert _digest(source) == before  # the source run is read, never written
    return source, root / "ext"


def test_cli_writes_every_row_and_only_the_fine_tune_changes_the_weights(extended):
    source, out = extended
    results = json.loads((out / "results.json").read_text())
    assert set(results["rows"]) == {"source", "none+ft", "pi", "pi+ft", "longrope", "longrope+ft"}
    assert results["config"]["train_len"] == 16 and results["config"]["eval_lens"] == [16, 32, 64, 128]
    for name in ("results.md", "ppl.png", "passkey.png"):
        assert (out / name).stat().st_size > 0
    report = (out / "results.md").read_text()
    assert (
        "| PI fine-tuned vs plain extrapolation fine-tuned (PI paper: PI better) | ppl(pi+ft) / ppl(none+ft) |"
        in report
        and "ppl(yarn+ft)" not in report
    )  # a claim is listed only when both its rows ran
    trained = load_model(source)
    for method in ("none", "pi", "longrope"):
        tuned = load_model(out / "rows" / method)
        scaling = tuned.cfg.position_params["scaling"]
        assert scaling == results["rows"][f"{method}+ft"]["scaling"]
        if method == "pi":
            assert scaling == {"type": "linear", "factor": 4.0}
        theirs = tuned.state_dict()
        assert set(theirs) == set(trained.state_dict())
        assert any(not torch.equal(v, theirs[k]) for k, v in trained.state_dict().items())
    source_row = results["rows"]["source"]["ppl"]
    eval_time = results["rows"]["pi"]["ppl"]
    assert all(math.isfinite(v) for r in (source_row, eval_time) for v in next(iter(r.values())).values())


def test_every_row_is_scored_on_the_suite_where_its_prompts_fit(extended):
    from posformer.experiments.extension.source import load_source
    from posformer.experiments.extension.suite import common_means
    from posformer.experiments.longeval.tasks import get_task

    source, out = extended
    results = json.loads((out / "results.json").read_text())
    encode = load_source(source, None).encode
    for row, record in results["rows"].items():
        for task in results["config"]["suite_tasks"]:
            fitting = [n for n in results["config"]["passkey_lengths"] if n >= get_task(task).minimum_length(encode)]
            assert [int(n) for n in record["suite"].get(task, {})] == fitting, (row, task)
        means = common_means(record["suite"])
        assert means and all(0 <= v <= 1 for v in means.values())
    report = (out / "results.md").read_text()
    assert "## Long-context suite: mean exact match by length, effective length" in report
    assert "### suite, pi+ft: exact match by task and length" in report
    for name in ("suite.png", "effective_length.png"):
        assert (out / name).stat().st_size > 0


def test_without_the_books_the_suite_drops_its_book_tasks_and_says_so(extended, tmp_path, monkeypatch, capsys):
    source, _ = extended
    monkeypatch.setenv("POSFORMER_DATA_DIR", str(tmp_path / "nowhere"))
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 400)
    args = [
        *EXTEND,
        "--methods",
        "pi",
        "--steps",
        "0",
        "--text",
        str(text),
        "--train-len",
        "16",
        "--set",
        "suite_tasks=[single_noise,multikey]",
    ]
    assert main(["extend", str(source), *args, "--output-dir", str(tmp_path / "e")]) == 0
    assert "suite: tasks multikey skipped" in capsys.readouterr().out
    results = json.loads((tmp_path / "e" / "results.json").read_text())
    assert set(results["rows"]["source"]["suite"]) == {"single_noise"}


def test_rerun_skips_recorded_methods_and_a_new_method_is_added(extended, capsys):
    source, out = extended
    assert main(["extend", str(source), *EXTEND, "--methods", "none,pi,longrope,yarn", "--output-dir", str(out)]) == 0
    log = capsys.readouterr().out
    assert "pi: already recorded" in log and "longrope: already recorded" in log
    assert {"yarn", "yarn+ft"} <= set(json.loads((out / "results.json").read_text())["rows"])


def test_dynamic_yarn_reads_l_as_the_source_and_fine_tunes_as_yarn(extended, tmp_path):
    """--methods yarn,dynyarn: eval-time dynamic YaRN reads L = 16 exactly as the source and the target 64 exactly
    as yarn, and reads 32 with its own factor 2. Its fine-tune is yarn's (the same batches and, at 64, the same
    frequencies: the same weights bit for bit), so the fine-tuned rows agree up to 64 and part at 128, where
    dynyarn+ft scales by 128 / 16."""
    source, _ = extended
    out = tmp_path / "e"
    assert main(["extend", str(source), *EXTEND, "--methods", "yarn,dynyarn", "--output-dir", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert set(rows) == {"source", "yarn", "yarn+ft", "dynyarn", "dynyarn+ft"}
    assert rows["dynyarn"]["scaling"] == {"type": "dynamic_yarn", "factor": 1.0, "original_max_position_embeddings": 16}
    assert rows["dynyarn+ft"]["scaling"] == {**rows["dynyarn"]["scaling"], "factor": 4.0}
    for name in rows["source"]["ppl"]:

        def ppl(row: str, n: int) -> float:
            return rows[row]["ppl"][name][str(n)]

        assert ppl("dynyarn", 16) == ppl("source", 16) and ppl("dynyarn", 64) == ppl("yarn", 64)
        assert ppl("dynyarn", 32) != ppl("yarn", 32)
        assert all(ppl("dynyarn+ft", n) == ppl("yarn+ft", n) for n in (16, 32, 64))
        assert ppl("dynyarn+ft", 128) != ppl("yarn+ft", 128) and math.isfinite(ppl("dynyarn+ft", 128))
    yarn, dynyarn = load_model(out / "rows" / "yarn"), load_model(out / "rows" / "dynyarn")
    assert all(torch.equal(v, dynyarn.state_dict()[k]) for k, v in yarn.state_dict().items())
    assert dynyarn.cfg.position_params["scaling"] == rows["dynyarn+ft"]["scaling"]
    assert "| dynyarn+ft | fine-tuned |" in (out / "results.md").read_text()


def test_steps_zero_scales_at_eval_time_only(extended, tmp_path):
    source, _ = extended
    assert (
        main(["extend", str(source), *EXTEND, "--steps", "0", "--methods", "pi", "--output-dir", str(tmp_path / "e")])
        == 0
    )
    assert set(json.loads((tmp_path / "e" / "results.json").read_text())["rows"]) == {"source", "pi"}
    assert not (tmp_path / "e" / "rows").exists()


def test_a_fine_tune_can_keep_the_sources_passkey_mix(extended, tmp_path):
    source, _ = extended
    tuned = {}
    for fraction in (0.0, 0.5):
        out = tmp_path / str(fraction)
        args = ["--methods", "yarn", "--set", f"passkey_fraction={fraction}", "--output-dir", str(out)]
        assert main(["extend", str(source), *EXTEND, *args]) == 0
        assert json.loads((out / "results.json").read_text())["config"]["passkey_fraction"] == fraction
        tuned[fraction] = load_model(out / "rows" / "yarn").state_dict()
    # the same seed, steps and start: only the passkey rows in the batches differ
    assert any(not torch.equal(v, tuned[0.5][k]) for k, v in tuned[0.0].items())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target-len", "16"], "target_len=16 is invalid"),
        (["--target-len", "64", "--methods", "pi,rope"], "methods='rope' is invalid"),
        (["--target-len", "64", "--set", "suite_tasks=[needle]"], "suite_tasks='needle' is invalid"),
        (["--target-len", "64", "--set", "passkey_fraction=2"], "passkey_fraction=2 is invalid"),
        ([], "--target-len is required"),
    ],
)
def test_bad_arguments_are_named(extended, tmp_path, capsys, args, message):
    source, _ = extended
    base = [a for a in EXTEND if a not in ("--target-len", "64")]
    assert main(["extend", str(source), *base, *args, "--output-dir", str(tmp_path / "e")]) != 0
    assert message in capsys.readouterr().err


def test_a_run_without_data_needs_text(extended, tmp_path, capsys):
    source, _ = extended
    model = load_model(source)
    save_pretrained(model, tmp_path / "bare")
    assert main(["extend", str(tmp_path / "bare"), *EXTEND, "--output-dir", str(tmp_path / "e")]) != 0
    assert "give --text FILE" in capsys.readouterr().err


def test_plot_redraws_the_figures_of_results_directories(extended, tmp_path, capsys):
    source, out = extended
    lm = source.parent.parent
    assert main(["plot", "--output-dir", str(tmp_path), "--results", str(out), str(lm)]) == 0
    for name in (f"{out.name}-ppl.png", f"{out.name}-passkey.png", f"{lm.name}-ppl.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert main(["plot", "--output-dir", str(tmp_path), "--results", str(tmp_path)]) != 0
    assert "no results.json" in capsys.readouterr().err


def test_any_run_extends_on_a_text_file(extended, tmp_path):
    from posformer.data.text import default_corpus

    source, _ = extended
    assert (
        main(
            [
                "extend",
                str(source),
                *EXTEND,
                "--methods",
                "ntk",
                "--steps",
                "1",
                "--text",
                str(default_corpus()),
                "--train-len",
                "16",
                "--output-dir",
                str(tmp_path / "e"),
            ]
        )
        == 0
    )
    results = json.loads((tmp_path / "e" / "results.json").read_text())
    assert list(results["data"]["eval_sets"]) == [default_corpus().stem]
    assert set(results["rows"]) == {"source", "ntk", "ntk+ft"} and results["config"]["train_len"] == 16


def test_longrope_recipe_extends_progressively_and_readjusts_the_short_factors(extended, tmp_path):
    """With a stage at 32: a search and a fine-tune there, a new search at 64 and the fine-tune at 64 (each model
    with its stage's searched factors), then the short factors: the readjusted model is the last fine-tune's
    weights and long factors with the recorded short factors."""
    source, _ = extended
    out = tmp_path / "e"
    assert (
        main(
            [
                "extend",
                str(source),
                *EXTEND,
                "--methods",
                "longrope",
                "--steps",
                "4",
                "--set",
                "longrope_stages=[32]",
                "--set",
                "longrope_short=true",
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    row = results["rows"]["longrope+ft"]
    assert [(st["length"], st["steps"]) for st in row["stages"]] == [(32, 2)]
    assert row["longrope_search"]["length"] == 64 and row["steps"] == 4
    stage, final = load_model(out / "rows" / "longrope-32"), load_model(out / "rows" / "longrope")
    assert stage.cfg.position_params["scaling"]["long_factor"] == row["stages"][0]["long_factor"]
    assert final.cfg.position_params["scaling"]["long_factor"] == row["longrope_search"]["long_factor"]
    readjusted = load_model(out / "rows" / "longrope" / "readjusted")
    scaling = readjusted.cfg.position_params["scaling"]
    assert scaling == {**final.cfg.position_params["scaling"], "short_factor": row["short_search"]["short_factor"]}
    assert row["scaling"] == scaling and row["short_search"]["ppl"] <= row["short_search"]["unadjusted_ppl"]
    for name, tensor in final.state_dict().items():
        assert torch.equal(readjusted.state_dict()[name], tensor), name
    assert "LongRoPE recipe: searched at 32" in (out / "results.md").read_text()


def test_the_short_factor_readjustment_runs_without_stages(extended, tmp_path):
    """longrope_short alone: the eval-time search's factors are fine-tuned with every step, then readjusted."""
    source, _ = extended
    out = tmp_path / "e"
    assert (
        main(
            [
                "extend",
                str(source),
                *EXTEND,
                "--methods",
                "longrope",
                "--steps",
                "2",
                "--set",
                "longrope_short=true",
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    row = json.loads((out / "results.json").read_text())["rows"]["longrope+ft"]
    assert row["stages"] == [] and "longrope_search" not in row and row["steps"] == 2
    scaling = load_model(out / "rows" / "longrope" / "readjusted").cfg.position_params["scaling"]
    assert scaling["short_factor"] == row["short_search"]["short_factor"]


def test_the_training_free_methods_run_end_to_end_with_their_papers_parameters(extended, tmp_path):
    """ReRoPE, Self-Extend, dual chunk attention and StreamingLLM: one eval-time row each, scored on the same
    grids, with the parameters chosen from L = 16 and the target 64; nothing fine-tuned (they are training-free)."""
    source, _ = extended
    out = tmp_path / "e"
    assert main(["extend", str(source), *EXTEND, "--methods", ",".join(PIECEWISE), "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["rows"]) == {"source", *PIECEWISE} and not (out / "rows").exists()
    chosen = {
        "rerope": {"window": 4},
        "self_extend": {"group_size": 16, "neighbor_window": 4},
        "dual_chunk": {"chunk_size": 12, "local_size": 2},
        "streaming": {"sinks": 4, "window": 12},
        "window": {"sinks": 0, "window": 16},
    }
    for method, params in chosen.items():
        row = results["rows"][method]
        assert (row["stage"], row["position"], row["method_params"]) == ("eval-time", position_of(method), params)
        assert row["ppl"].keys() == results["rows"]["source"]["ppl"].keys()
        assert all(math.isfinite(v) for by_length in row["ppl"].values() for v in by_length.values())
        assert row["passkey"].keys() == results["rows"]["source"]["passkey"].keys()
    report = (out / "results.md").read_text()
    assert "ppl(streaming) / ppl(source)" in report and "rerope: window=4" in report
    assert "ppl(streaming) / ppl(window)" in report


def test_a_source_without_rope_is_refused_naming_its_position_and_the_methods(extended, tmp_path, capsys):
    source, _ = extended
    trained = load_model(source)
    alibi = pf.Transformer(trained.cfg.replace(position="alibi"))
    files = {name: path.read_text(encoding="utf-8") for name, path in tokenizer_paths(checkpoint_dir(source)).items()}
    save_pretrained(alibi, tmp_path / "alibi", files)
    args = ["--methods", "rerope,self_extend", "--text", str(default_corpus()), "--train-len", "16"]
    assert main(["extend", str(tmp_path / "alibi"), *EXTEND, *args, "--output-dir", str(tmp_path / "e")]) != 0
    assert "uses position 'alibi'; the context-extension methods (rerope, self_extend)" in capsys.readouterr().err


def test_extend_over_seeds_extends_each_seeds_source_and_calls_claims_seed_by_seed(extended, tmp_path):
    source, _ = extended
    lm = tmp_path / "lm"
    assert main(["extrapolate", *ROW, "--seeds", "2", "--output-dir", str(lm)]) == 0
    runs = str(lm / "seed-{seed}" / "rows" / "rope")
    args = [*EXTEND, "--methods", "none,pi", "--seeds", "2", "--output-dir", str(tmp_path / "e")]
    assert main(["extend", runs, *args]) == 0
    record = json.loads((tmp_path / "e" / "results.json").read_text())
    assert record["benchmark"] == "extend" and list(record["per_seed"]) == ["0", "1"]
    for seed, run in record["per_seed"].items():
        assert run["source"]["run"].endswith(f"seed-{seed}/rows/rope")
    text = (tmp_path / "e" / "results.md").read_text()
    assert "over 2 seeds (0, 1)" in text and "| pi+ft |" in text and "ppl(pi+ft) / ppl(none+ft)" in text
