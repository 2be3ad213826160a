"""Block losses (paired across lengths), the bootstrap intervals, the unigram baseline and the bytes preset of the
LM benchmark."""

from __future__ import annotations

import math
import re

import pytest
import torch

import posformer as pf
from posformer.experiments.corpus import encode, train_bpe, unigram_perplexity
from posformer.experiments.extrapolation.bootstrap import ppl_interval, ratio_interval
from posformer.experiments.extrapolation.evaluation import block_losses, chunk_nll, perplexity, sliding_nll
from posformer.experiments.extrapolation.settings import ExtrapolationSettings


def _model() -> pf.Transformer:
    torch.manual_seed(0)
    return pf.Transformer(
        pf.Config(arch="decoder", vocab_size=40, d_model=16, n_layers=1, n_heads=2, position="rope", max_positions=64)
    ).eval()


@pytest.mark.parametrize("protocol,stride", [("nonoverlapping", None), ("sliding", 3)])
def test_block_losses_add_up_to_the_protocol_totals(protocol, stride):
    model = _model()
    g = torch.Generator().manual_seed(1)
    docs = {"a": torch.randint(0, 40, (64,), generator=g), "b": torch.randint(0, 40, (32,), generator=g)}
    with torch.no_grad():
        totals = [
            chunk_nll(model, d, 8, 40) if protocol == "nonoverlapping" else sliding_nll(model, d, 8, 3, 40)
            for d in docs.values()
        ]
    losses = block_losses(model, docs, 8, 16, protocol, stride, batch_tokens=40)
    assert losses.nll.shape == losses.count.shape == (64 // 16 + 32 // 16,)
    assert float(losses.nll.sum()) == pytest.approx(sum(t[0] for t in totals), rel=1e-9)
    assert int(losses.count.sum()) == sum(t[1] for t in totals)
    assert losses.perplexity() == pytest.approx(perplexity(model, docs, 8, protocol, stride, 40), rel=1e-9)


def test_blocks_pair_the_same_text_across_lengths():
    model, ids = _model(), {"a": torch.randint(0, 40, (64,), generator=torch.Generator().manual_seed(2))}
    for length in (4, 8, 16):
        losses = block_losses(model, ids, length, 16)
        assert losses.count.tolist() == [16 // length * (length - 1)] * 4  # each block: its own chunks only
    with torch.no_grad():
        per_token = torch.nn.functional.cross_entropy(
            model(ids["a"][None, 16:32]).logits[0, :-1].double(), ids["a"][17:32], reduction="sum"
        )
    assert float(block_losses(model, ids, 16, 16).nll[1]) == pytest.approx(float(per_token), rel=1e-6)


def test_a_length_the_encoding_cannot_represent_is_none():
    model = pf.Transformer(
        pf.Config(
            arch="decoder", vocab_size=40, d_model=16, n_layers=1, n_heads=2, position="learned", max_positions=64
        )
    )
    assert block_losses(model, {"a": torch.zeros(256, dtype=torch.long)}, 128, 128) is None


def test_ppl_interval_covers_the_true_perplexity_about_95_percent_of_the_time():
    """Blocks with a known mean NLL per token: the percentile interval must cover exp(mean) in ~95% of trials."""
    g = torch.Generator().manual_seed(3)
    true_mean, covered, trials = 2.0, 0, 300
    for trial in range(trials):
        count = torch.randint(50, 150, (40,), generator=g)
        nll = torch.distributions.Gamma(4.0, 2.0).sample((40, 150))  # mean 2 per token
        sums = [float(row[:c].sum()) for row, c in zip(nll, count)]
        low, high = ppl_interval(sums, count.tolist(), resamples=500, seed=trial)
        covered += low <= math.exp(true_mean) <= high
    assert 0.90 <= covered / trials <= 0.99


def test_paired_ratio_interval_is_narrower_than_its_parts_and_contains_the_ratio():
    g = torch.Generator().manual_seed(4)
    hardness = torch.rand(30, generator=g, dtype=torch.float64) * 3 + 1  # the text's difficulty, shared
    count = [100] * 30
    a = ((hardness + 0.2 + 0.01 * torch.randn(30, generator=g, dtype=torch.float64)) * 100).tolist()
    b = (hardness * 100).tolist()
    ratio = math.exp(sum(a) / 3000 - sum(b) / 3000)
    low, high = ratio_interval((a, count), (b, count))
    a_low, a_high = ppl_interval(a, count)
    assert low <= ratio <= high and high / low < 1.02 < a_high / a_low


def test_bootstrap_needs_two_blocks_and_equal_parts():
    with pytest.raises(ValueError, match="at least 2"):
        ppl_interval([1.0], [1])
    with pytest.raises(ValueError, match="same blocks"):
        ratio_interval(([1.0, 2.0], [1, 1]), ([1.0], [1]))


def test_unigram_perplexity_is_the_exponentiated_cross_entropy():
    train = torch.tensor([0] * 6 + [1] * 2 + [2] * 0)  # add-one: counts 7, 3, 1 over 11
    evals = {"d": torch.tensor([0, 1, 2, 0])}
    want = math.exp(-(2 * math.log(7 / 11) + math.log(3 / 11) + math.log(1 / 11)) / 4)
    assert unigram_perplexity(train, evals, 3) == pytest.approx(want, rel=1e-12)


def test_the_bytes_preset_reads_one_token_per_byte():
    settings = ExtrapolationSettings.preset("bytes")
    assert settings.vocab_size == 257 and settings.eval_tokens % max(settings.eval_lens) == 0
    tokenizer = train_bpe({"book": "The grass is green. Ça va? " * 50}, settings.vocab_size, 10_000)
    text = "Zebra naïve 71432 — ok"
    ids = encode(tokenizer, text)
    assert len(tokenizer) == 257 and ids.numel() == len(text.encode("utf-8"))
    assert tokenizer.decode(ids.tolist()) == text


def test_results_md_reports_the_unigram_baseline_and_ratio_intervals(tmp_path):
    from posformer.cli import main

    args = [
        "extrapolate",
        "--preset",
        "quick",
        "--positions",
        "rope",
        "--train-len",
        "16",
        "--eval-lens",
        "16,32",
        "--steps",
        "2",
        "--d-model",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
        "--vocab-size",
        "257",
        "--eval-tokens",
        "512",
        "--tokenizer-chars",
        "20000",
        "--no-progress",
        "--set",
        "train_chars=40000",
        "--set",
        "rope_scalings=[]",
        "--output-dir",
        str(tmp_path),
    ]
    assert main(args) == 0
    table = (tmp_path / "results.md").read_text()
    assert "A unigram model (training-set token frequencies, no context) reads" in table
    assert re.search(r"\| rope \| 1\.00 \| \d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\] \|", table)
