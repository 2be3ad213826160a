"""Causal attention with a bias in blocks of queries: the attention formula, whatever the block size."""

from __future__ import annotations

import math

import pytest
import torch

import posformer.ops.causal_blocks as causal_blocks
from posformer.ops.causal_blocks import causal_blocks_attention, use_causal_blocks


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """softmax_j<=i(scale * q_i . k_j + bias_ij) v_j, written out: (B, H, T, dh)."""
    repeat = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    length = q.shape[-2]
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    scores = scale * q @ k.transpose(-1, -2)
    scores = (scores if bias is None else scores + bias).masked_fill(future, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("block_rows", [1, 3, 4, 11])
@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("bias_batch", [1, 2, None])
def test_blocks_give_the_attention_formula_and_its_gradients(block_rows, kv_heads, bias_batch, monkeypatch) -> None:
    monkeypatch.setattr(causal_blocks, "BLOCK_ROWS", block_rows)
    q = torch.randn(2, 4, 11, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, kv_heads, 11, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, kv_heads, 11, 8, dtype=torch.float64, requires_grad=True)
    bias = None if bias_batch is None else torch.randn(bias_batch, 4, 11, 11, dtype=torch.float64, requires_grad=True)
    out = causal_blocks_attention(q, k, v, bias, 0.3, 0.0)
    expected = reference(q, k, v, bias, 0.3)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
    weights = torch.randn_like(out)
    inputs = (q, k, v) if bias is None else (q, k, v, bias)
    grads = torch.autograd.grad((out * weights).sum(), inputs)
    expected_grads = torch.autograd.grad((expected * weights).sum(), inputs)
    for name, grad, want in zip("qkvb", grads, expected_grads):
        torch.testing.assert_close(grad, want, atol=1e-12, rtol=1e-12, msg=name)


def test_a_bias_past_the_diagonal_is_never_read(monkeypatch) -> None:
    monkeypatch.setattr(causal_blocks, "BLOCK_ROWS", 2)
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    poisoned = bias.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), math.nan)
    torch.testing.assert_close(
        causal_blocks_attention(q, k, v, poisoned, 0.5, 0.0),
        causal_blocks_attention(q, k, v, bias, 0.5, 0.0),
        atol=0,
        rtol=0,
    )


def test_blocks_run_for_a_plain_causal_mask_longer_than_a_block_and_without_a_bias_not_too_long(monkeypatch) -> None:
    monkeypatch.setattr(causal_blocks, "BLOCK_ROWS", 4)
    monkeypatch.setattr(causal_blocks, "NO_BIAS_MAX_LENGTH", 6)
    q, bias = torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 7)
    assert use_causal_blocks(q, bias, is_causal=True)
    assert not use_causal_blocks(q, bias, is_causal=False)
    assert not use_causal_blocks(q[:, :, :4], bias[:, :, :4, :4], is_causal=True)
    assert not use_causal_blocks(q, None, is_causal=True)
    assert use_causal_blocks(q[:, :, :6], None, is_causal=True)
    assert not use_causal_blocks(q[:, :, :4], None, is_causal=True)


@pytest.mark.parametrize("with_bias", [True, False])
def test_the_eager_path_of_a_values_term_in_blocks_equals_one_call(with_bias, monkeypatch) -> None:
    """A `values` term (Shaw's) forces the eager path; in blocks it is asked for each block's query rows and
    key prefix, and the output and gradients equal one whole call."""
    from posformer.modules.attend import attend
    from posformer.ops.masks import AttentionMask

    q, k, v = (torch.randn(2, 4, 10, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = torch.randn(1, 4, 10, 10, dtype=torch.float64, requires_grad=True) if with_bias else None
    per_key = torch.randn(10, 8, dtype=torch.float64)
    per_query = torch.randn(10, 1, dtype=torch.float64)

    def values(probs: torch.Tensor, rows: slice) -> torch.Tensor:
        return probs @ per_key[: probs.shape[-1]] * per_query[rows]

    def run(block_rows: int):
        monkeypatch.setattr(causal_blocks, "BLOCK_ROWS", block_rows)
        out, _ = attend(q, k, v, AttentionMask(is_causal=True), bias, 0.3, values=values)
        inputs = (q, k, v) if bias is None else (q, k, v, bias)
        return out, torch.autograd.grad(out.square().sum(), inputs)

    whole, whole_grads = run(10)
    blocked, blocked_grads = run(3)
    torch.testing.assert_close(blocked, whole, atol=1e-12, rtol=1e-12)
    for grad, want in zip(blocked_grads, whole_grads):
        torch.testing.assert_close(grad, want, atol=1e-12, rtol=1e-12)
