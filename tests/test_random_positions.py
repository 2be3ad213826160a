"""Randomized positional encodings (`Config.random_positions`, Ruoss et al. 2023): while training, each row's
positions are an ordered subset of [0, L) drawn uniformly; evaluation keeps 0..T-1; bad settings and inputs
longer than the range are refused by name."""

import math

import pytest
import torch

import posformer as pf
from posformer.modules.random_positions import sample_positions
from tests.positions.test_positions_conformance import config

L = 64


def seen_positions(model: pf.Transformer, ids: torch.Tensor) -> torch.Tensor:
    """The position ids the decoder stack received in one forward."""
    seen = []
    handle = model.decoder.register_forward_pre_hook(lambda module, args: seen.append(args[1]))
    model(ids, labels=ids)
    handle.remove()
    return seen[0]


def test_training_draws_an_increasing_subset_of_the_range_for_each_row() -> None:
    model = pf.Transformer(config("rope", "decoder", random_positions=L)).train()
    pos = seen_positions(model, torch.randint(1, 53, (8, 12)))
    assert pos.shape == (8, 12) and int(pos.min()) >= 0 and int(pos.max()) < L
    assert bool((pos[:, 1:] > pos[:, :-1]).all())
    assert len({tuple(row.tolist()) for row in pos}) == 8  # one draw per row


def test_evaluation_keeps_the_plain_positions() -> None:
    model = pf.Transformer(config("rope", "decoder", random_positions=L)).eval()
    assert torch.equal(seen_positions(model, torch.randint(1, 53, (2, 12))), torch.arange(12).expand(2, 12))


def test_the_drawn_subsets_are_uniform() -> None:
    """For an ordered uniform k-subset of {0..L-1}, the i-th smallest (1-based) has mean i (L + 1) / (k + 1) - 1;
    20,000 draws put the sample means within 0.35 (5 standard errors) of it."""
    torch.manual_seed(0)
    k = 8
    pos = sample_positions(20_000, k, L).double()
    expected = torch.arange(1, k + 1, dtype=torch.float64) * (L + 1) / (k + 1) - 1
    assert (pos.mean(0) - expected).abs().max() < 0.35
    assert math.isclose(float(pos[:, 0].min()), 0.0) and math.isclose(float(pos[:, -1].max()), L - 1)


def test_the_training_loss_is_the_loss_at_the_drawn_positions() -> None:
    model = pf.Transformer(config("alibi", "decoder", random_positions=L)).train()
    ids = torch.randint(1, 53, (3, 10))
    torch.manual_seed(5)
    drawn = sample_positions(3, 10, L)
    torch.manual_seed(5)
    loss = model(ids, labels=ids).loss
    torch.testing.assert_close(loss, model(ids, labels=ids, position_ids=drawn).loss, atol=0, rtol=0)


def test_an_input_longer_than_the_range_is_refused() -> None:
    model = pf.Transformer(config("rope", "decoder", random_positions=8)).train()
    with pytest.raises(ValueError, match=r"cannot draw 10 distinct positions from \[0, Config.random_positions=8\)"):
        model(torch.randint(1, 53, (1, 10)))


@pytest.mark.parametrize(
    "position, value, message",
    [
        ("rope", 0, "a positive integer"),
        ("learned", 17, r"at most 16, the positions position='learned' can represent"),
        ("relative_key", 17, r"at most 16"),
    ],
)
def test_bad_ranges_name_the_field(position: str, value: int, message: str) -> None:
    with pytest.raises(ValueError, match=rf"Config.random_positions={value} is invalid: expected {message}"):
        config(position, "decoder", random_positions=value)
