"""The speed benchmark runs end to end on a tiny configuration."""

import pytest

pytest.importorskip("transformers")

from posformer.bench.speed import run  # noqa: E402


def test_run_tiny_reports_positive_throughput_and_ratio():
    result = run(batch=2, length=16, d_model=32, layers=1, heads=4, vocab=128, d_ff=64,
                 warmup=0, iters=1, threads=1, progress=False)
    for phase in ("forward", "train"):
        figures = result[phase]
        assert figures["posformer_tok_s"] > 0
        assert figures["hf_tok_s"] > 0
        assert figures["ratio"] == pytest.approx(figures["posformer_tok_s"] / figures["hf_tok_s"])
