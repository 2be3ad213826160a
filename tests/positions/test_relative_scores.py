"""The diagonal (strided) reading of relative scores equals the gather it replaces, values and gradients."""

from __future__ import annotations

import pytest
import torch

from posformer.positions.relative_scores import (
    Diagonal,
    counts_up,
    key_position_scores,
    pair_rows,
    query_position_scores,
    relative_distance,
)

# (cached positions before the queries, queries, causal: distances below 0 read as 0)
SHAPES = [(0, 6, False), (0, 6, True), (4, 3, True), (4, 3, False), (7, 1, True), (2, 1, False), (0, 1, False)]


@pytest.mark.parametrize("past, q_len, causal", SHAPES)
@pytest.mark.parametrize("per_head", [False, True])
def test_diagonal_scores_equal_the_gathered_ones(past: int, q_len: int, causal: bool, per_head: bool) -> None:
    torch.manual_seed(past * 10 + q_len)
    start = 5  # positions need not start at 0
    k_pos = torch.arange(start, start + past + q_len)[None]
    q_pos = k_pos[:, past:]
    dist = relative_distance(q_pos, k_pos)
    if causal:
        dist = dist.clamp(min=0)
    low, high = int(dist.min()), int(dist.max())
    diagonal = pair_rows(q_pos, k_pos, dist, low)
    assert isinstance(diagonal, Diagonal)
    rows = dist - low
    table = torch.randn(*((3,) if per_head else ()), high - low + 1, 4, requires_grad=True)
    q = torch.randn(2, 3, q_len, 4, requires_grad=True)
    k = torch.randn(2, 3, past + q_len, 4, requires_grad=True)
    attended = (k_pos[:, None, :] <= q_pos[:, :, None]) if causal else torch.ones(1, q_len, past + q_len, dtype=bool)
    weights = torch.randn(2, 3, q_len, past + q_len) * attended[:, None]  # masked pairs get no gradient

    def scores_and_grads(index):
        scores = query_position_scores(q, table, index, k.shape[-2]) + key_position_scores(k, table, index, q.shape[-2])
        grads = torch.autograd.grad((scores * weights).sum(), (q, k, table))
        return scores, grads

    gathered, gathered_grads = scores_and_grads(rows)
    strided, strided_grads = scores_and_grads(diagonal)
    mask = attended[:, None].expand_as(gathered)
    torch.testing.assert_close(strided[mask], gathered[mask])
    for got, expected in zip(strided_grads, gathered_grads):
        torch.testing.assert_close(got, expected)


def test_only_positions_that_count_up_in_one_row_are_diagonal() -> None:
    assert counts_up(torch.arange(3, 9)[None]) and counts_up(torch.tensor([[4]]))
    assert not counts_up(torch.tensor([[0, 1, 3]]))
    assert not counts_up(torch.arange(4).repeat(2, 1))  # two rows: each may differ
    left_padded = torch.tensor([[0, 0, 1, 2]])
    dist = relative_distance(left_padded, left_padded)
    assert torch.equal(pair_rows(left_padded, left_padded, dist, -2), dist + 2)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("diagonal", [True, False])
def test_a_narrow_block_scores_each_key_against_its_pairs_rows(causal: bool, per_head: bool, diagonal: bool) -> None:
    """A block of 3 queries over 21 keys (the key side taken pair by pair, or in tiles of keys when the positions
    count up) gives k_j . table[row_ij] written out, at every pair a causal mask keeps."""
    torch.manual_seed(1)
    first_query = 30 if causal else 20  # the last 3 of 21 keys (a partial tile), or 3 amid them
    q_pos, k_pos = torch.arange(first_query, first_query + 3)[None], torch.arange(12, 33)[None]
    dist = relative_distance(q_pos, k_pos)
    low = 0 if causal else int(dist.min())
    dist = dist.clamp(min=0) if causal else dist
    index = pair_rows(q_pos, k_pos, dist, low) if diagonal else (dist - low).expand(2, 3, 21)
    dist = dist - low  # each pair's table row
    assert isinstance(index, Diagonal) == diagonal
    table = torch.randn(*((3,) if per_head else ()), int(dist.max()) + 1, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 21, 4, dtype=torch.float64, requires_grad=True)
    scores = key_position_scores(k, table, index, q_len=3)
    vectors = table[:, dist[0]] if per_head else table[dist[0]][None].expand(3, 3, 21, 4)  # (H, Tq, Tk, dh)
    expected = torch.einsum("bhjd,hijd->bhij", k, vectors)
    kept = (k_pos[:, None, :] <= q_pos[:, :, None]) | (not causal)
    kept = kept[:, None].expand_as(scores)  # a masked pair reads any value
    torch.testing.assert_close(scores[kept], expected[kept])
    weights = torch.randn_like(scores) * kept
    grads = torch.autograd.grad((scores * weights).sum(), (k, table))
    expected_grads = torch.autograd.grad((expected * weights).sum(), (k, table))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("q_len", [2, 12])  # a narrow block of queries, and a wide one
def test_a_table_longer_than_the_pairs_read_gives_the_same_scores(q_len: int) -> None:
    """A table of every distance of a long sequence, read by a block that spans a few of them: the diagonal scores
    (which read only the rows the pairs use) equal the gathered ones, values and gradients."""
    torch.manual_seed(q_len)
    k_pos = torch.arange(40, 52)[None]
    q_pos = k_pos[:, -q_len:]
    dist = relative_distance(q_pos, k_pos)
    extra, low = 30, int(dist.min())  # 30 unread rows on each side
    table = torch.randn(2, int(dist.max()) - low + 1 + 2 * extra, 4, dtype=torch.float64, requires_grad=True)
    q = torch.randn(1, 2, q_len, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 12, 4, dtype=torch.float64, requires_grad=True)

    def scores_and_grads(index):
        scores = query_position_scores(q, table, index, 12) + key_position_scores(k, table, index, q_len)
        return scores, torch.autograd.grad((scores * scores.detach().cos()).sum(), (q, k, table))

    diagonal = pair_rows(q_pos, k_pos, dist, low - extra)
    assert isinstance(diagonal, Diagonal)
    strided, strided_grads = scores_and_grads(diagonal)
    gathered, gathered_grads = scores_and_grads(dist - low + extra)
    torch.testing.assert_close(strided, gathered)
    for got, want in zip(strided_grads, gathered_grads):
        torch.testing.assert_close(got, want)
