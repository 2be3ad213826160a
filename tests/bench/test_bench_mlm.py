"""`posformer bench --mlm` trains posformer (the loss alone, and with logits) and HF's BertForMaskedLM from the
same weights on the same masked batch."""

import json

import pytest

pytest.importorskip("transformers")

from posformer.bench.mlm import RUNS, MLMOptions, format_report, run  # noqa: E402
from posformer.cli import main  # noqa: E402

TINY = dict(
    batch=2,
    length=16,
    d_model=32,
    layers=1,
    heads=4,
    d_ff=64,
    vocab=200,
    mask_rate=0.3,
    warmup=0,
    iters=2,
    threads=1,
    progress=False,
)


def test_the_three_runs_compute_one_loss_and_their_ratios_to_hf():
    result = run(MLMOptions(**TINY))
    losses = result["first_loss"]
    assert set(losses) == set(RUNS)
    assert losses["posformer"] == pytest.approx(losses["hf"], abs=1e-5)
    assert losses["posformer_logits"] == pytest.approx(losses["hf"], abs=1e-5)
    assert 0 < result["labelled_tokens"] < 2 * 16
    for key in RUNS:
        assert len(result[f"{key}_s"]) == 2 and result[f"{key}_tok_s"] > 0
    assert result["ratio"] == pytest.approx(result["posformer_tok_s"] / result["hf_tok_s"])
    assert result["ratio_logits"] == pytest.approx(result["posformer_logits_tok_s"] / result["hf_tok_s"])
    report = format_report(result)
    assert f"{result['ratio']:.3f}" in next(line for line in report.splitlines() if line.startswith(RUNS["posformer"]))


def test_cli_writes_json_and_refuses_a_mask_rate_outside_0_1(tmp_path, capsys):
    path = tmp_path / "mlm.json"
    argv = [
        "bench",
        "--mlm",
        "--batch",
        "2",
        "--length",
        "16",
        "--d-model",
        "32",
        "--layers",
        "1",
        "--heads",
        "4",
        "--d-ff",
        "64",
        "--vocab",
        "200",
        "--warmup",
        "0",
        "--iters",
        "1",
        "--threads",
        "1",
        "--no-progress",
    ]
    assert main([*argv, "--json", str(path)]) == 0
    assert json.loads(path.read_text())["ratio"] > 0
    assert "posformer, loss alone" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*argv, "--mask-rate", "1.5"])
    assert "--mask-rate: 1.5 is not a number in (0, 1]" in capsys.readouterr().err
