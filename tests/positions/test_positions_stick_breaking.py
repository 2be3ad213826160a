"""Stick-breaking attention (Tan et al., ICLR 2025): the weights against the paper's product formula written out
pair by pair, their sum at most 1, the dependence on the order of the keys, and the blocks of queries.

The conformance suite runs it as every encoding (cached decoding, left padding, 4x the length, gradients).
"""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.ops.masks import build_mask
from posformer.ops.weighted_attention import weighted_attention
from tests.conftest import tiny


def _encoding(attend_current: bool = False) -> pf.positions.PositionEncoding:
    cfg = tiny("decoder", position="stick_breaking", position_params={"attend_current": attend_current})
    return pf.positions.build(cfg, causal=True, n_layers=1)


def _product_formula(scores: torch.Tensor, seen: torch.Tensor, attend_current: bool) -> torch.Tensor:
    """w_ij = sigmoid(z_ij) * prod_{j < k < i} (1 - sigmoid(z_ik)) over the seen keys, pair by pair; with
    attend_current, k <= i and j <= i."""
    batch, heads, rows, keys = scores.shape
    beta = torch.sigmoid(scores.double())
    weights = torch.zeros_like(beta)
    for b in range(batch):
        for h in range(heads):
            for i in range(rows):
                last = i if attend_current else i - 1
                for j in range(keys):
                    if j > last or not seen[b, 0, i, j]:
                        continue
                    w = beta[b, h, i, j]
                    for k in range(j + 1, last + 1):
                        if seen[b, 0, i, k]:
                            w = w * (1 - beta[b, h, i, k])
                    weights[b, h, i, j] = w
    return weights


@pytest.mark.parametrize("attend_current", [False, True])
def test_weights_follow_the_product_formula(attend_current: bool) -> None:
    torch.manual_seed(0)
    scores = 3 * torch.randn(2, 3, 6, 6)
    seen = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    seen[1, :, :, :2] = False  # a left-padded row: its first two keys are hidden
    seen[0, :, 4, 1] = False  # and a key hidden from one query alone
    ours = _encoding(attend_current).key_weights(scores, seen, torch.arange(6), 0)
    torch.testing.assert_close(ours.double(), _product_formula(scores, seen, attend_current))


def test_weights_sum_to_at_most_one_even_for_large_scores() -> None:
    scores = 40 * torch.randn(2, 4, 64, 64)
    weights = _encoding().key_weights(scores, torch.ones(1, 1, 64, 64, dtype=torch.bool), torch.arange(64), 0)
    assert bool(torch.isfinite(weights).all()) and bool((weights >= 0).all())
    assert float(weights.sum(-1).max()) <= 1 + 1e-6


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    length = q.shape[-2]
    mask = build_mask(None, True, length, length, q.dtype, q.device)
    weigh = lambda scores, seen, q_index: _encoding().key_weights(scores, seen, q_index, 0)  # noqa: E731
    return weighted_attention(q, k, v, mask, 0.5, weigh, rows)[0]


def test_swapping_two_earlier_keys_changes_the_output() -> None:
    """Softmax attention without positions is blind to the order of the keys; stick-breaking is not: the nearer
    key breaks the stick first. Swapping keys 0 and 2 (with their values) changes the last query's output."""
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    order = torch.tensor([2, 1, 0, 3, 4])
    plain, swapped = _attend(q, k, v), _attend(q, k[:, :, order], v[:, :, order])
    assert (plain[:, :, -1] - swapped[:, :, -1]).abs().max() > 1e-3


def test_blocks_of_queries_change_no_output_or_gradient() -> None:
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 4, 13, 8, requires_grad=True) for _ in range(3))
    whole = _attend(q, k, v)
    grads = torch.autograd.grad(whole.square().sum(), (q, k, v))
    blocks = _attend(q, k, v, rows=4)
    torch.testing.assert_close(blocks, whole)
    for ours, reference in zip(torch.autograd.grad(blocks.square().sum(), (q, k, v)), grads):
        torch.testing.assert_close(ours, reference)


def test_the_first_token_attends_to_nothing_unless_it_may_attend_to_itself() -> None:
    model = pf.Transformer(tiny("decoder", position="stick_breaking")).eval()
    ids = torch.randint(1, 61, (1, 4))
    weights = model(ids, output_attentions=True).attentions[0]  # (B, H, T, T)
    assert float(weights[0, :, 0].abs().max()) == 0.0
    assert float(weights[0, :, 1, 0].min()) > 0.0
    current = pf.Transformer(tiny("decoder", position="stick_breaking", position_params={"attend_current": True}))
    assert float(current.eval()(ids, output_attentions=True).attentions[0][0, :, 0, 0].min()) > 0.0


def test_flex_attention_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="stick_breaking.*no score_mod"):
        tiny("decoder", position="stick_breaking", attn_impl="flex")
