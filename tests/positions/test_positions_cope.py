"""CoPE (Golovneva et al. 2024) by the properties that define it: positions count the gated keys from each key
to the query, a key whose gate is shut adds nothing to the count, all gates open give the token distance + 1,
the term interpolates linearly between the integer positions, and the count is capped at npos_max - 1."""

import pytest
import torch

import posformer as pf
from posformer.positions.cope import CountedPositionTerm, interpolate, steps_between
from tests.positions.test_positions_conformance import config

HEAD_DIM = 8


def cope(npos_max: int = 64) -> pf.positions.ContextualPosition:
    torch.manual_seed(0)
    model = pf.Transformer(config("cope", "decoder", n_layers=1, position_params={"npos_max": npos_max}))
    return model.decoder.position


def aligned(length: int, sign: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (1, 4, T, dh) whose every scaled q.k is +-45 (gates 1 or 0 up to 3e-20)."""
    q = torch.full((1, 4, length, HEAD_DIM), 4.0 * sign)
    return q, torch.full((1, 4, length, HEAD_DIM), 4.0)


def test_open_gates_count_the_token_distance_plus_one_and_later_keys_count_zero() -> None:
    encoding = cope()
    q, k = aligned(7)
    pos = torch.arange(7)[None]
    counts = encoding.counts(q, k, pos, pos)[0, 0]
    i, j = torch.arange(7)[:, None], torch.arange(7)[None, :]
    torch.testing.assert_close(counts, torch.where(j <= i, i - j + 1, 0).float())


def test_a_shut_gate_adds_nothing_to_the_count() -> None:
    """Key 2 points against the query: its gate shuts, so keys 0..2 are counted one less
    from query 5 than with every gate open, and keys 3..5 as before."""
    encoding = cope()
    q, k = aligned(6)
    k[:, :, 2] = -4.0
    pos = torch.arange(6)[None]
    counts = encoding.counts(q, k, pos, pos)[0, 0, 5]
    torch.testing.assert_close(counts, torch.tensor([5.0, 4.0, 3.0, 3.0, 2.0, 1.0]))


def test_the_count_is_capped_at_npos_max_minus_one() -> None:
    encoding = cope(npos_max=4)
    q, k = aligned(9)
    pos = torch.arange(9)[None]
    assert encoding.counts(q, k, pos, pos).max() == 3.0


def test_the_term_interpolates_between_integer_positions() -> None:
    """At p = 2.25: 0.75 q.e[2] + 0.25 q.e[3]; at an integer p, q.e[p]; at the cap P - 1, q.e[P - 1]."""
    at_integers = torch.randn(1, 4, 3, 6)
    counts = torch.tensor([2.25, 4.0, 5.0]).expand(1, 4, 3, 3)
    expected = torch.stack(
        (0.75 * at_integers[..., 2] + 0.25 * at_integers[..., 3], at_integers[..., 4], at_integers[..., 5]), dim=-1
    )
    torch.testing.assert_close(interpolate(at_integers, counts), expected)


def _term_by_autograd(logits: torch.Tensor, at_integers: torch.Tensor, before: torch.Tensor, cap: int):
    """The paper's formula, differentiated by autograd: gates, the count from each key to the query (clamped),
    and the linear interpolation between the integer positions below and above."""
    gates = torch.sigmoid(logits) * before
    counts = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=cap)
    low = counts.floor()
    below = at_integers.gather(-1, low.long())
    above = at_integers.gather(-1, counts.ceil().long())
    return below + (counts - low) * (above - below)


@pytest.mark.parametrize("cap", [3, 30])
def test_the_written_backward_equals_autograd_through_the_formula(cap: int) -> None:
    """float64, queries at 0..T-1 over keys at 0..T-1 (causal): value and both gradients; cap 3 clamps most
    counts, cap 30 none."""
    torch.manual_seed(1)
    logits = torch.randn(2, 3, 9, 9, dtype=torch.float64, requires_grad=True)
    at_integers = torch.randn(2, 3, 9, cap + 1, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(9)
    before = (pos[None, :] <= pos[:, None])[None, None]
    upstream = torch.randn(2, 3, 9, 9, dtype=torch.float64)
    ours = CountedPositionTerm.apply(logits, at_integers, steps_between(at_integers), before, cap)
    reference = _term_by_autograd(logits, at_integers, before, cap)
    torch.testing.assert_close(ours, reference, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(ours, (logits, at_integers), upstream)
    want = torch.autograd.grad(reference, (logits, at_integers), upstream)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_the_written_backward_passes_gradcheck() -> None:
    torch.manual_seed(2)
    logits = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    at_integers = torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    before = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
    term = CountedPositionTerm.apply
    assert torch.autograd.gradcheck(lambda a, b: term(a, b, steps_between(b), before, 7), (logits, at_integers))


def test_shut_gates_leave_every_key_at_position_zero_which_softmax_ignores() -> None:
    """With every gate shut, each key gets q.e[0]: the same term along a query's row, so the attention
    probabilities are those of no position encoding."""
    encoding = cope()
    q, k = aligned(5, sign=-1.0)
    pos = torch.arange(5)[None]
    bias = encoding.bias(q, k, pos, pos, 0).detach()
    torch.testing.assert_close(bias, bias[..., :1].expand_as(bias))
