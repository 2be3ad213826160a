"""The speed benchmark runs end to end on a tiny configuration, against both peers."""

import pytest

pytest.importorskip("transformers")

from posformer.bench.speed import SpeedOptions, format_report, ratio_key, run  # noqa: E402
from posformer.bench.x_transformers_peer import x_transformers_available  # noqa: E402

TINY = dict(
    batch=2, length=16, d_model=32, layers=1, heads=4, vocab=128, d_ff=64, warmup=0, iters=1, threads=1, progress=False
)


def test_run_tiny_reports_positive_throughput_and_ratios():
    result = run(SpeedOptions(**TINY))
    peers = ["hf"] + (["x_transformers"] if x_transformers_available() else [])
    assert list(result["peer_params"]) == peers
    for phase in ("forward", "train"):
        figures = result[phase]
        assert figures["posformer_tok_s"] > 0
        for peer in peers:
            ratio = figures[ratio_key(peer)]
            assert ratio == pytest.approx(figures["posformer_tok_s"] / figures[f"{peer}_tok_s"])
    report = format_report(result)
    assert ("vs x-transformers" in report) == ("x_transformers" in peers)
    train_row = next(line for line in report.splitlines() if line.startswith("train "))
    assert f"{result['train']['ratio']:.3f}" in train_row
    assert f"posformer {result['train']['posformer_tflops']:.2f}" in report


@pytest.mark.skipif(not x_transformers_available(), reason="x-transformers is not installed")
def test_x_transformers_peer_trains_on_the_next_token_loss():
    import torch

    from posformer.bench.speed import bench_config
    from posformer.bench.x_transformers_peer import XTransformersLM

    torch.manual_seed(0)
    model = XTransformersLM(bench_config(d_model=32, layers=1, heads=4, vocab=50, d_ff=64, length=8))
    ids = torch.randint(0, 50, (2, 8))
    logits = model(ids[:, :-1]).logits
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:])
    torch.testing.assert_close(model(ids, labels=ids).loss, expected)
    with pytest.raises(ValueError, match="labels must equal input_ids"):
        model(ids, labels=ids.flip(1))


def test_compiled_run_reports_its_compile_time_apart():
    result = run(SpeedOptions(**TINY, compile=True))
    assert result["compile"] is True and set(result["compile_s"]) == {"forward", "train"}
    assert all(seconds > 0 for seconds in result["compile_s"].values())
    assert result["train"]["posformer_tok_s"] > 0
    assert "posformer under torch.compile (HF eager); compilation took" in format_report(result)
