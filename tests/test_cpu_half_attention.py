"""`posformer.ops.cpu_half_attention`: bf16 training attention on the CPU, against float64 softmax attention, and
the dispatch that uses it only while training, in bf16, on the CPU, below MAX_SCORES."""

from __future__ import annotations

import math

import pytest
import torch

import posformer as pf
from posformer.ops import cpu_half_attention as half
from tests.conftest import tiny


def reference(q, k, v, additive, scale):
    """softmax(scale * q.k + additive) v in float64, keys and values repeated for grouped heads."""
    q, k, v = (t.double() for t in (q, k, v))
    repeat = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    scores = scale * q @ k.transpose(-1, -2)
    if additive is not None:
        scores = scores + additive.double()
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize(
    "heads, kv_heads, mask",
    [(4, 4, None), (4, 4, "keys"), (4, 2, "keys"), (4, 1, "rows")],
)
def test_bf16_output_and_gradients_match_float64_attention(heads, kv_heads, mask):
    torch.manual_seed(0)
    batch, length, width = 3, 11, 8
    q = torch.randn(batch, heads, length, width, dtype=torch.float64)
    k, v = (torch.randn(batch, kv_heads, length, width, dtype=torch.float64) for _ in range(2))
    additive = None
    if mask == "keys":  # a padding mask (B, 1, 1, S): the last keys of the first row are padding
        additive = torch.zeros(batch, 1, 1, length)
        additive[0, ..., -4:] = torch.finfo(torch.bfloat16).min
    elif mask == "rows":  # a causal mask (1, 1, T, S)
        allowed = torch.ones(length, length, dtype=torch.bool).tril()
        additive = torch.zeros(length, length).masked_fill(~allowed, torch.finfo(torch.bfloat16).min)[None, None]
    scale = 1 / math.sqrt(width)
    low = [t.bfloat16().requires_grad_() for t in (q, k, v)]
    out = half.cpu_half_attention(*low, additive, scale, 0.0)
    assert out.dtype == torch.bfloat16 and out.shape == (batch, heads, length, width)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = reference(*full, additive, scale)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=3e-2)  # bf16 keeps 8 bits of mantissa
    grad = torch.randn_like(expected)
    out.backward(grad.bfloat16())
    expected.backward(grad)
    for ours, theirs in zip(low, full):
        torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=0, atol=6e-2)


def test_it_runs_only_while_training_in_half_precision_on_the_cpu_below_the_size_limit():
    q = torch.randn(2, 4, 16, 8, dtype=torch.bfloat16, requires_grad=True)
    assert half.use_cpu_half_attention(q, q)
    assert not half.use_cpu_half_attention(q.float(), q.float())  # float32: SDPA
    assert not half.use_cpu_half_attention(q.detach(), q.detach())  # no gradient (evaluation): SDPA
    with torch.no_grad():
        assert not half.use_cpu_half_attention(q, q)
    over = math.isqrt(half.MAX_SCORES // (2 * 4)) + 1  # B * H * T * S just over the limit
    big = torch.zeros(2, 4, over, 8, dtype=torch.bfloat16, requires_grad=True)  # small: only the scores are many
    assert not half.use_cpu_half_attention(big, big)
    assert half.use_cpu_half_attention(big[:, :, : over - 1], big[:, :, : over - 1])


def test_a_bf16_training_step_of_a_model_uses_it_and_trains_as_float32_does(monkeypatch):
    torch.manual_seed(0)
    model = pf.Transformer(tiny("encoder", head="span_qa", dropout=0.0, attention_dropout=0.0)).train()
    ids = torch.randint(3, 61, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    batch = dict(
        input_ids=ids, attention_mask=mask, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4])
    )
    calls = []
    kernel = half.cpu_half_attention
    monkeypatch.setattr("posformer.modules.attend.cpu_half_attention", lambda *a: calls.append(1) or kernel(*a))
    full = model(**batch).loss
    assert not calls  # float32 keeps SDPA
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(**batch).loss
    assert len(calls) == model.cfg.n_layers
    assert low.item() == pytest.approx(full.item(), rel=2e-2)
