"""The generation benchmark runs end to end on a tiny GPT-2, through `posformer bench --generation`."""

import math
import re

import pytest

pytest.importorskip("transformers")

from posformer.cli import main  # noqa: E402


def test_bench_generation_tiny_prints_positive_ratio(capsys):
    assert (
        main(
            [
                "bench",
                "--generation",
                "--batch",
                "1",
                "2",
                "--new-tokens",
                "4",
                "--prompt-length",
                "3",
                "--d-model",
                "32",
                "--layers",
                "1",
                "--heads",
                "4",
                "--vocab",
                "101",
                "--warmup",
                "0",
                "--iters",
                "1",
                "--threads",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    report = capsys.readouterr().out
    rows = re.findall(r"^\s*(\d+)\s+([\d,.]+)\s+([\d,.]+)\s+([\d.]+)\s+(yes|NO)$", report, flags=re.MULTILINE)
    assert [int(row[0]) for row in rows] == [1, 2], report
    for _, ours, theirs, ratio, same in rows:
        ours, theirs, ratio = (float(x.replace(",", "")) for x in (ours, theirs, ratio))
        assert math.isfinite(ratio) and ratio > 0 and ours > 0 and theirs > 0
        assert same == "yes"


def test_bench_generation_refuses_bad_options(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--generation", "--new-tokens", "0"])
    assert "argument --new-tokens: 0 is not a positive integer" in capsys.readouterr().err


def test_bench_options_reach_the_benchmark_parsers(capsys):
    """`posformer bench --OPTION` passes leading options on (argparse's REMAINDER alone would refuse them)."""
    for argv, usage in (
        (["bench", "--help"], "posformer.bench.speed"),
        (["bench", "--generation", "--help"], "posformer bench --generation"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
        assert usage in capsys.readouterr().out
