"""CoPE (Golovneva et al. 2024) by the properties that define it: positions count the gated keys from each key
to the query, a key whose gate is shut adds nothing to the count, all gates open give the token distance + 1,
the term interpolates linearly between the integer positions, and the count is capped at npos_max - 1."""

import torch

import posformer as pf
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


def test_the_term_interpolates_between_integer_positions(monkeypatch) -> None:
    """At p = 2.25: 0.75 q.e[2] + 0.25 q.e[3], with e the layer's table (dh, npos_max)."""
    encoding = cope()
    q, k = torch.randn(1, 4, 3, HEAD_DIM), torch.randn(1, 4, 3, HEAD_DIM)
    pos = torch.arange(3)[None]
    monkeypatch.setattr(encoding, "counts", lambda *args: torch.full((1, 4, 3, 3), 2.25))
    table = encoding.table[0].detach()
    expected = (0.75 * (q @ table[:, 2]) + 0.25 * (q @ table[:, 3]))[..., None].expand(1, 4, 3, 3)
    torch.testing.assert_close(encoding.bias(q, k, pos, pos, 0).detach(), expected)


def test_shut_gates_leave_every_key_at_position_zero_which_softmax_ignores() -> None:
    """With every gate shut, each key gets q.e[0]: the same term along a query's row, so the attention
    probabilities are those of no position encoding."""
    encoding = cope()
    q, k = aligned(5, sign=-1.0)
    pos = torch.arange(5)[None]
    bias = encoding.bias(q, k, pos, pos, 0).detach()
    torch.testing.assert_close(bias, bias[..., :1].expand_as(bias))
