"""Shaw's clipped bins: the scatter-free lookups and sums equal torch's gather and scatter_add, values and
gradients, for every placement of the queries among the keys."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.positions.clipped_bins import ClippedBins, range_sums
from posformer.positions.relative_scores import relative_distance

# (k, queries, keys, position of the first key minus that of the first query)
PLACEMENTS = [
    (1, 5, 5, 0),
    (3, 6, 6, 0),
    (2, 3, 9, -6),
    (4, 1, 12, -11),
    (3, 4, 4, 7),
    (2, 4, 4, -9),
    (5, 7, 3, 2),
    (16, 6, 6, 0),
    (2, 1, 1, 0),
    (16, 37, 37, 0),
    (3, 40, 70, -30),
    (2, 64, 64, 0),
    (4, 33, 96, 5),
]  # keys beyond one chunk (CHUNK = 32) of prefix_sums


def _bins(k: int, q_len: int, k_len: int, shift: int, scattered: bool) -> ClippedBins:
    q_pos, k_pos = torch.arange(q_len)[None] + 10, torch.arange(k_len)[None] + 10 + shift
    index = (-relative_distance(q_pos, k_pos)).clamp(-k, k) + k
    return ClippedBins(k, index, None if scattered else shift)


@pytest.mark.parametrize("k, q_len, k_len, shift", PLACEMENTS)
def test_sums_and_lookups_equal_scatter_add_and_gather(k: int, q_len: int, k_len: int, shift: int) -> None:
    torch.manual_seed(k * 100 + q_len * 10 + k_len)
    pairs = torch.randn(2, 3, q_len, k_len, dtype=torch.float64, requires_grad=True)
    per_bin = torch.randn(2, 3, q_len, 2 * k + 1, dtype=torch.float64, requires_grad=True)
    up_sums, up_lookup = torch.randn(2, 3, q_len, 2 * k + 1, dtype=torch.float64), torch.randn_like(pairs)
    results = []
    for scattered in (True, False):
        bins = _bins(k, q_len, k_len, shift, scattered)
        sums, looked_up = bins.sums(pairs), bins.lookup(per_bin)
        grads = torch.autograd.grad((sums * up_sums).sum() + (looked_up * up_lookup).sum(), (pairs, per_bin))
        results.append((sums, looked_up, *grads))
    for got, expected in zip(results[1], results[0]):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k, q_len, k_len, shift", PLACEMENTS[:4])
def test_the_scatter_free_functions_pass_gradcheck(k: int, q_len: int, k_len: int, shift: int) -> None:
    bins = _bins(k, q_len, k_len, shift, scattered=False)
    pairs = torch.randn(1, 2, q_len, k_len, dtype=torch.float64, requires_grad=True)
    per_bin = torch.randn(1, 2, q_len, 2 * k + 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(bins.sums, (pairs,))
    assert torch.autograd.gradcheck(bins.lookup, (per_bin,))


def test_bf16_sums_are_accumulated_in_float32_and_rounded_once() -> None:
    """2,000 probabilities of about 1/2,000 summed in bfloat16 one by one stall near 0.5 (bf16 keeps 8 bits);
    accumulated in float32, the end bins hold their totals to within one bf16 rounding."""
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(1, 2, 4, 2048) * 0.1, dim=-1).bfloat16()
    sums = range_sums(probs, k=8, shift=-2044)  # the queries are the last 4 keys
    exact = range_sums(probs.double(), k=8, shift=-2044)
    assert sums.dtype == torch.bfloat16
    assert (exact[..., 0] > 0.98).all()
    assert ((sums.double() - exact).abs() <= exact.abs() * 2.0**-8).all()


def test_shaw_takes_the_scatter_free_path_only_where_positions_count_up() -> None:
    cfg = pf.Config(
        position="shaw",
        position_params={"max_distance": 2},
        d_model=16,
        n_heads=2,
        n_layers=1,
        vocab_size=11,
        max_positions=16,
    )
    shaw = pf.positions.build(cfg, causal=True, n_layers=1)
    assert shaw.bins(torch.arange(3, 7)[None], torch.arange(7)[None]).shift == -3
    assert shaw.bins(torch.tensor([[0, 1, 3]]), torch.tensor([[0, 1, 3]])).shift is None
    assert shaw.bins(torch.tensor([[0, 1], [2, 3]]), torch.tensor([[0, 1], [2, 3]])).shift is None


def test_a_shaw_model_trains_alike_on_either_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole model, decoder with the causal blocks of the CPU: loss and every gradient equal whether the
    bins are scattered or range-summed."""
    torch.manual_seed(0)
    cfg = pf.Config(
        position="shaw",
        position_params={"max_distance": 3},
        d_model=32,
        n_heads=4,
        n_layers=2,
        vocab_size=23,
        max_positions=64,
    )
    model = pf.Transformer(cfg).double()
    ids = torch.randint(0, 23, (2, 40))
    results = []
    for scattered in (False, True):
        if scattered:
            monkeypatch.setattr("posformer.positions.shaw.counts_up", lambda pos: False)
        out = model(ids, labels=ids)
        grads = torch.autograd.grad(out.loss, list(model.parameters()))
        results.append((out.loss, *grads))
    for got, expected in zip(results[0], results[1]):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
