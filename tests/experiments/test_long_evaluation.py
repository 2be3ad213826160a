"""Long evaluations: the memory fit check before `extrapolate` and `extend` start, the head's loss in chunks of
rows, the progress counts, and both commands scoring at 16x the training length end to end (tiny models)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import posformer as pf
from posformer.cli import main
from posformer.experiments import memory_fit
from posformer.experiments.extrapolation import evaluation
from posformer.experiments.extrapolation.settings import ExtrapolationSettings, model_config
from posformer.experiments.memory_fit import DoesNotFit, Need, check_fit, evaluation_need
from posformer.modules import bias_blocks
from tests.experiments.test_extend_cli import ROW

TRAIN_LEN = 16


def _model(position: str = "alibi", vocab: int = 50) -> pf.Transformer:
    torch.manual_seed(0)
    cfg = pf.Config(arch="decoder", vocab_size=vocab, d_model=16, n_layers=2, n_heads=2, position=position)
    return pf.Transformer(cfg).eval()


def _meminfo(monkeypatch, tmp_path, available_bytes: int) -> None:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       99999999 kB\nMemAvailable:   {available_bytes // 1024} kB\n")
    monkeypatch.setattr(memory_fit, "MEMINFO", path)


def test_available_memory_is_read_from_meminfo(monkeypatch, tmp_path):
    _meminfo(monkeypatch, tmp_path, 3 * 2**30)
    assert memory_fit.available_bytes("cpu") == (3 * 2**30, f"MemAvailable in {tmp_path / 'meminfo'}")


def test_the_shortest_length_that_does_not_fit_is_named_with_its_estimate(monkeypatch, tmp_path):
    _meminfo(monkeypatch, tmp_path, 2**30)
    needs = [Need("scoring", n, 1, {"activations": n * 2**16}, "Evaluate fewer lengths.") for n in (4096, 32768, 65536)]
    check_fit("extrapolate", needs[:1], "cpu")  # 0.25 GiB of 1 GiB: fits
    with pytest.raises(DoesNotFit) as err:
        check_fit("extrapolate", needs, "cpu")
    message = str(err.value)
    assert message.startswith("extrapolate: scoring at 32,768 tokens (batch 1): about 2.00 GiB (activations 2.00 GiB)")
    assert "1.00 GiB is available" in message and "would not fit: 32,768, 65,536" in message
    assert message.endswith("Evaluate fewer lengths.")


def test_the_estimate_counts_the_built_model_and_grows_linearly_with_the_length():
    settings = ExtrapolationSettings.preset("cpu")
    for position in ("rope", "t5"):
        cfg = model_config(settings, position, settings.vocab_size)
        assert memory_fit.weight_count(cfg) == pytest.approx(pf.Transformer(cfg).num_parameters(), rel=0.01)
    small, large = (evaluation_need(cfg, n, 1, "", "") for n in (2048, 8192))
    assert small.parts["weights"] == 4 * memory_fit.weight_count(cfg)
    assert large.parts["activations"] == 4 * small.parts["activations"]
    assert 0 < large.parts["bias"] <= 4 * small.parts["bias"]  # blocks of queries: at most linear


def test_chunked_head_equals_the_whole_logits_and_progress_counts_every_token(monkeypatch):
    model, g = _model(), torch.Generator().manual_seed(1)
    streams = {"a": torch.randint(0, 50, (96,), generator=g), "b": torch.randint(0, 50, (40,), generator=g)}
    monkeypatch.setattr(evaluation, "chunk_rows", lambda vocab: 7)  # chunks that cut windows apart
    counted = []
    losses = evaluation.block_losses(model, streams, 16, 16, "sliding", 12, batch_tokens=32, advance=counted.append)
    assert sum(counted) == evaluation.tokens_read(streams, 16, "sliding", 12) == 16 * (7 + 3)
    with torch.no_grad():
        windows = streams["a"][:16][None]
        whole = F.cross_entropy(model(windows).logits[0, :-1], windows[0, 1:], reduction="none").double()
    torch.testing.assert_close(evaluation._token_nll(model, windows)[0], whole)
    assert math.isfinite(losses.perplexity())


def test_extrapolate_refuses_a_length_that_does_not_fit_before_any_work(monkeypatch, tmp_path, capsys):
    _meminfo(monkeypatch, tmp_path, 384 * 2**20)
    args = [*ROW, "--eval-lens", "16,65536", "--output-dir", str(tmp_path / "out")]
    assert main(["extrapolate", *args]) == 2
    err = capsys.readouterr().err
    assert "evaluating the rope row at 65,536 tokens (batch 1)" in err and "0.38 GiB is available" in err
    assert "leave 65536 out of --eval-lens" in err and not (tmp_path / "out" / "rows").exists()


@pytest.fixture(scope="module")
def rope_row(tmp_path_factory):
    out = tmp_path_factory.mktemp("long")
    assert main(["extrapolate", *ROW, "--eval-lens", "16", "--output-dir", str(out)]) == 0
    return out / "rows" / "rope"


def test_extrapolate_scores_at_16x_the_training_length_in_bias_blocks(monkeypatch, tmp_path):
    monkeypatch.setitem(bias_blocks.BIAS_BYTES, "cpu", (2**12, 2**11))  # alibi's bias at 256 comes by blocks
    args = [*ROW, "--positions", "alibi,rope", "--eval-lens", "16,256", "--set", "rope_scalings=[yarn]"]
    assert main(["extrapolate", *args, "--output-dir", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    for row in ("alibi", "rope", "rope+yarn"):
        assert (
            math.isfinite(rows[row]["ppl"]["tinyshakespeare"]["256"]) and rows[row]["ppl"]["tinyshakespeare"]["256"] > 1
        )


def test_extend_scores_at_16x_and_refuses_a_fine_tune_that_does_not_fit(rope_row, monkeypatch, tmp_path, capsys):
    extend = ["extend", str(rope_row), "--preset", "quick", "--target-len", "128", "--no-progress"]
    # one window of the longest length to score: one bootstrap block, so the report's ratios carry no interval
    knobs = ["--set", "eval_tokens=256", "--set", "passkey_trials=2", "--set", "passkey_depths=[0.5]"]
    assert main([*extend, *knobs, "--steps", "0", "--methods", "yarn", "--output-dir", str(tmp_path / "e")]) == 0
    results = json.loads((tmp_path / "e" / "results.json").read_text())
    assert results["config"]["eval_lens"] == [16, 32, 64, 128, 256]
    assert "| yarn | eval-time |" in (tmp_path / "e" / "results.md").read_text()
    for row in ("source", "yarn"):
        assert math.isfinite(results["rows"][row]["ppl"]["tinyshakespeare"]["256"])
        assert 0 <= results["rows"][row]["passkey"]["256"]["0.5"]["exact"] <= 1
    _meminfo(monkeypatch, tmp_path, 448 * 2**20)
    big = ["--set", "batch_size=4096", "--methods", "pi", "--output-dir", str(tmp_path / "f")]
    assert main([*extend, *knobs, *big]) == 2
    err = capsys.readouterr().err
    assert "fine-tuning at 128 tokens (batch 4096)" in err and "Lower batch_size" in err
    assert not (tmp_path / "f" / "rows").exists()
