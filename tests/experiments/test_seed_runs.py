"""`posformer extrapolate --seeds`: each seed a whole run of its own, the record over seeds, resume, refusals."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from posformer.cli import main
from posformer.experiments.seeds.runs import parse_seeds, rows_in_order, run_over_seeds

TINY_TASK = ["--task", "copy", "--positions", "none,rope", "--no-progress", "--steps", "12",
             "--set", "eval_examples=8", "--set", "d_model=16", "--set", "layers=1", "--set", "heads=2",
             "--set", "batch_size=8", "--set", "warmup=2", "--set", "save_every=6"]  # fmt: skip


def test_seeds_are_a_count_from_seed_or_a_list() -> None:
    assert parse_seeds("3", 5) == [5, 6, 7] and parse_seeds("0, 4,2", 9) == [0, 4, 2]
    assert parse_seeds("0,", 9) == [0] and parse_seeds("1", 4) == [4]
    for bad, why in (
        ("0", "a count is at least 1; seed 0 alone is the list '0,'"),
        ("a,b", "comma-separated seeds"),
        ("1,1", "listed twice"),
        ("-1,2", ">= 0"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_seeds(bad, 0)


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    out = tmp_path_factory.mktemp("seeds")
    assert main(["extrapolate", *TINY_TASK, "--seeds", "2", "--output-dir", str(out)]) == 0
    return out


def test_each_seed_is_the_run_that_seed_alone_gives(two_seeds, tmp_path) -> None:
    record = json.loads((two_seeds / "results.json").read_text())
    assert record["benchmark"] == "tasks" and record["seeds"] == [0, 1] and list(record["per_seed"]) == ["0", "1"]
    assert "seed" not in record["config"] and record["provenance"][0]["command"].startswith("posformer extrapolate")
    assert main(["extrapolate", *TINY_TASK, "--seed", "1", "--output-dir", str(tmp_path)]) == 0
    alone = json.loads((tmp_path / "results.json").read_text())
    seeded = record["per_seed"]["1"]
    assert {row: r["accuracy"] for row, r in seeded["rows"].items()} == {
        row: r["accuracy"] for row, r in alone["rows"].items()
    }
    assert seeded["rows"]["rope"]["final_loss"] == alone["rows"]["rope"]["final_loss"]
    assert seeded["rows"]["rope"]["final_loss"] != record["per_seed"]["0"]["rows"]["rope"]["final_loss"]
    assert json.loads((two_seeds / "seed-0" / "results.json").read_text()) == record["per_seed"]["0"]


def test_the_record_over_seeds_reports_means_intervals_and_pairs(two_seeds) -> None:
    text = (two_seeds / "results.md").read_text()
    assert "over 2 seeds (0, 1)" in text and "| seed 0 | seed 1 |" in text and "| none - rope |" in text


def test_a_third_seed_adds_to_the_record_and_the_others_resume(two_seeds, capsys) -> None:
    assert main(["extrapolate", *TINY_TASK, "--seeds", "0,1,2", "--output-dir", str(two_seeds)]) == 0
    assert "already recorded" in capsys.readouterr().out
    assert list(json.loads((two_seeds / "results.json").read_text())["per_seed"]) == ["0", "1", "2"]
    assert main(["extrapolate", *TINY_TASK, "--seeds", "1,0", "--output-dir", str(two_seeds)]) == 2
    assert "holds seeds ['0', '1', '2']" in capsys.readouterr().err


def test_seeds_refuse_a_one_seed_run(tmp_path, capsys) -> None:
    assert main(["extrapolate", *TINY_TASK, "--output-dir", str(tmp_path)]) == 0
    assert main(["extrapolate", *TINY_TASK, "--seeds", "2", "--output-dir", str(tmp_path)]) == 2
    assert "holds a one-seed run" in capsys.readouterr().err


def test_a_language_model_run_over_seeds_reports_geometric_means_and_rankings(tmp_path) -> None:
    from test_extrapolate import TINY

    out = tmp_path / "lm"
    assert main(["extrapolate", *TINY, "--seeds", "0,3", "--output-dir", str(out)]) == 0
    record = json.loads((out / "results.json").read_text())
    assert record["benchmark"] == "extrapolation" and list(record["per_seed"]) == ["0", "3"]
    text = (out / "results.md").read_text()
    assert "over 2 seeds (0, 3)" in text and "pairs seed by seed at L = 16" in text and "| learned |" in text
    ratio = [run["rows"]["rope"]["ppl"]["tinyshakespeare"] for run in record["per_seed"].values()]
    mean = math.exp(sum(math.log(r["64"] / r["16"]) for r in ratio) / 2)
    assert "| rope | 1.00 | " in text and f"{mean:.2f} [" in text
    assert "| alibi / rope+yarn | " in text and "| rope / rope+yarn | " not in text  # the baseline past L
    assert main(["plot", "--output-dir", str(tmp_path / "figs"), "--results", str(out)]) == 0
    assert (tmp_path / "figs" / "lm-ppl.png").stat().st_size > 0


def test_plot_draws_a_task_run_over_seeds_with_its_bands(two_seeds, tmp_path) -> None:
    assert main(["plot", "--output-dir", str(tmp_path), "--results", str(two_seeds)]) == 0
    assert (tmp_path / f"{two_seeds.name}-accuracy.png").stat().st_size > 0


def test_report_writes_its_tables_into_a_block_of_a_page(two_seeds, tmp_path, capsys) -> None:
    page = tmp_path / "page.md"
    page.write_text("# By hand\n\n<!-- report copy -->\n<!-- /report copy -->\n\nAfter.\n")
    assert main(["report", str(two_seeds), "--into", str(page), "--block", "copy"]) == 0
    text = page.read_text()
    assert text.startswith("# By hand\n\n<!-- report copy: posformer report ") and text.endswith("\n\nAfter.\n")
    assert "### Task `copy` over " in text and "- `posformer extrapolate --task copy" in text
    assert main(["report", str(two_seeds), "--into", str(page)]) == 2
    assert "--into FILE and --block NAME go together" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err


@dataclasses.dataclass
class _Settings:
    seed: int = 0
    rows: str = "a"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def test_adding_a_row_keeps_every_seeds_record_until_that_seed_returns(tmp_path) -> None:
    def rows_of(settings: _Settings, seed_root) -> dict:
        return {"rows": {row: settings.seed for row in settings.rows.split(",")}}

    run_over_seeds(_Settings(), tmp_path, [0, 1], rows_of, lambda record: "", "toy", log=lambda _: None)

    def fails_at_seed_1(settings: _Settings, seed_root) -> dict:
        if settings.seed == 1:
            raise RuntimeError("stopped")
        return rows_of(settings, seed_root)

    with pytest.raises(RuntimeError, match="stopped"):
        run_over_seeds(
            _Settings(rows="a,b"), tmp_path, [0, 1], fails_at_seed_1, lambda r: "", "toy", log=lambda _: None
        )
    record = json.loads((tmp_path / "results.json").read_text())
    assert record["per_seed"] == {"0": {"rows": {"a": 0, "b": 0}}, "1": {"rows": {"a": 1}}}
    assert len(record["provenance"]) == 1  # the same command line and commit: recorded once


def test_seeds_run_side_by_side_keep_each_others_records(tmp_path) -> None:
    def rows_of(settings: _Settings, seed_root) -> dict:
        return {"rows": {"a": settings.seed}}

    def toy(seeds: list[int], run_one=rows_of) -> dict:
        return run_over_seeds(_Settings(), tmp_path, seeds, run_one, lambda record: "", "toy", log=lambda _: None)

    toy([0])

    def seed_1_meanwhile(settings: _Settings, seed_root) -> dict:  # another process records seed 1 meanwhile
        toy([1])
        return rows_of(settings, seed_root)

    toy([2], seed_1_meanwhile)
    record = json.loads((tmp_path / "results.json").read_text())
    assert record["per_seed"] == {"0": {"rows": {"a": 0}}, "1": {"rows": {"a": 1}}, "2": {"rows": {"a": 2}}}
    assert record["seeds"] == [0, 1, 2] and list(record["per_seed"]) == ["0", "1", "2"]  # by number, as run apart
    toy([0, 1, 2, 3])  # the usual --seeds 4 goes on from seeds run side by side
    assert list(json.loads((tmp_path / "results.json").read_text())["per_seed"]) == ["0", "1", "2", "3"]
    with pytest.raises(ValueError, match=r"holds seeds \['0', '1', '2', '3'\].*or only new seeds"):
        toy([3, 4])


def test_rows_follow_the_runs_positions_whichever_seed_ran_first() -> None:
    first = {"rows": {"rope": {}, "rope+yarn": {}, "none": {}, "extra": {}}}  # rope recorded first in this seed
    second = {"rows": {"none": {}, "rope": {}, "rope+yarn": {}}}
    assert rows_in_order([first, second], ["none", "rope", "alibi"]) == ["none", "rope", "rope+yarn", "extra"]
    assert rows_in_order([second, first], ["none", "rope", "alibi"]) == ["none", "rope", "rope+yarn", "extra"]
