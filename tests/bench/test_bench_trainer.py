"""The trainer benchmark runs end to end on a tiny model, through `posformer bench --trainer`.

Both loops train the same model on the same batches with the same optimizer and
schedule, so beyond a positive ratio they must process the same tokens and
reach the same losses: a check of the trainer's arithmetic against a plain loop.
"""

import json
import math
import re

import pytest

from posformer.cli import main

TINY = [
    "--batch",
    "2",
    "--seq-len",
    "16",
    "--d-model",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "64",
    "--vocab",
    "0",
    "--steps",
    "3",
    "--warmup-steps",
    "1",
    "--repeats",
    "2",
    "--lr-warmup",
    "2",
    "--threads",
    "1",
    "--no-progress",
]


def test_bench_trainer_tiny_matches_plain_loop(capsys, tmp_path) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "--trainer", *TINY, "--json", str(out)]) == 0
    report = capsys.readouterr().out
    rows = dict(
        (name, (tok_s, tokens, loss))
        for name, tok_s, tokens, loss in re.findall(
            r"^(trainer|plain)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)\s+[\d,]+$", report, flags=re.MULTILINE
        )
    )
    assert set(rows) == {"trainer", "plain"}, report
    (ours, our_tokens, our_loss), (theirs, their_tokens, their_loss) = (
        [float(x.replace(",", "")) for x in rows[name]] for name in ("trainer", "plain")
    )
    assert ours > 0 and theirs > 0
    assert our_tokens == their_tokens == 3 * 2 * 16
    assert our_loss == pytest.approx(their_loss, abs=1e-5)
    ratio = float(re.search(r"ratio trainer/plain: ([\d.]+)", report).group(1))
    assert math.isfinite(ratio) and ratio > 0
    for other in re.search(
        r"per-repeat ratios ([\d.]+), ratio of the median single-step times ([\d.]+)", report
    ).groups():
        assert math.isfinite(float(other)) and float(other) > 0
    assert "progress bar disabled, metrics.jsonl logging enabled" in report and "not timed:" in report

    result = json.loads(out.read_text())
    assert result["ratio"] == pytest.approx(result["trainer"]["tok_s"] / result["plain"]["tok_s"])
    assert len(result["trainer"]["losses"]) == len(result["plain"]["losses"]) == 1 + 3 + 1
    assert result["trainer"]["losses"] == pytest.approx(result["plain"]["losses"], abs=1e-5)
    assert result["max_loss_diff"] <= 1e-5
    assert result["trainer"]["losses"][-1] < result["trainer"]["losses"][0]


def test_bench_trainer_refuses_bad_options(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--trainer", "--steps", "0"])
    assert "argument --steps: 0 is not a positive integer" in capsys.readouterr().err
    assert main(["bench", "--trainer", "--generation"]) == 2
    assert "at most one of --generation and --trainer" in capsys.readouterr().err


def test_bench_trainer_help_reaches_its_parser(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--trainer", "--help"])
    assert exit_info.value.code == 0
    assert "posformer bench --trainer" in capsys.readouterr().out
