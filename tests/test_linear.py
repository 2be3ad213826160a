"""`posformer.ops.linear`: the thread-split product equals `F.linear`, and is taken only where it says."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import posformer as pf
from posformer.bench.speed import torch_threads as threads
from posformer.ops.linear import BLOCKS_PER_THREAD, SPLIT_MAX_ROWS, SPLIT_MIN_FEATURES, Linear, linear, thread_blocks
from tests.conftest import tiny


@pytest.mark.parametrize("n_threads", [2, 3, 4])
@pytest.mark.parametrize("shape", [(1, 40), (3, 5, 40), (64, 40), (40,)])
@pytest.mark.parametrize("out_features", [96, 97, 50])
@pytest.mark.parametrize("with_bias", [True, False])
def test_split_product_equals_the_plain_one(n_threads, shape, out_features, with_bias):
    """float64, so that the two summation orders agree to rounding; 97 and 50 leave a remainder of rows."""
    x = torch.randn(*shape, dtype=torch.float64)
    weight = torch.randn(out_features, 40, dtype=torch.float64)
    bias = torch.randn(out_features, dtype=torch.float64) if with_bias else None
    with threads(n_threads), torch.no_grad():
        blocks = thread_blocks(x, weight)
        got = linear(x, weight, bias)
    assert blocks == min(n_threads * BLOCKS_PER_THREAD, out_features // SPLIT_MIN_FEATURES) > 1
    want = F.linear(x, weight, bias)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_split_is_taken_only_for_few_rows_without_autograd_on_several_threads():
    weight = torch.randn(64, 32)
    few, many = torch.randn(SPLIT_MAX_ROWS, 32), torch.randn(SPLIT_MAX_ROWS + 1, 32)
    with threads(2):
        with torch.no_grad():
            assert thread_blocks(few, weight) == 64 // SPLIT_MIN_FEATURES
            assert thread_blocks(many, weight) == 1
            assert thread_blocks(few, weight.t().contiguous().t()) == 1
            assert thread_blocks(few.double(), weight) == 1
            assert thread_blocks(few, torch.randn(31, 32)) == 1
        assert thread_blocks(few, weight.requires_grad_()) == 1
    with threads(1), torch.no_grad():
        assert thread_blocks(few, weight) == 1


def test_a_mismatched_input_gets_torchs_own_error():
    with threads(2), torch.no_grad():
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
            linear(torch.randn(2, 31), torch.randn(64, 32))
        with pytest.raises(RuntimeError):
            linear(torch.randn(2, 32), torch.randn(64, 32), torch.randn(63))
        assert thread_blocks(torch.randn(2, 32), torch.randn(64, 32), torch.randn(64).double()) == 1


def test_training_gradients_are_the_plain_products():
    layer = Linear(32, 64)
    x = torch.randn(4, 32, requires_grad=True)
    with threads(2):
        layer(x).square().sum().backward()
    want_x, want_w = torch.autograd.grad(F.linear(x, layer.weight, layer.bias).square().sum(), (x, layer.weight))
    torch.testing.assert_close(x.grad, want_x, rtol=0, atol=0)
    torch.testing.assert_close(layer.weight.grad, want_w, rtol=0, atol=0)


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_a_model_decodes_the_same_on_one_thread_and_on_several(preset):
    """Greedy tokens and the cached step's logits of a float64 model: 1 thread (plain products) vs 3 (split)."""
    shape = {f: getattr(tiny(), f) for f in ("vocab_size", "n_layers", "n_heads", "max_positions")}
    cfg = pf.Config.preset(preset, **shape, d_model=64, d_ff=96)
    model = pf.Transformer(cfg).double().eval()
    prompt = torch.randint(0, cfg.vocab_size, (2, 5))
    results = {}
    for n in (1, 3):
        with threads(n), torch.no_grad():
            first = model(prompt, use_cache=True)
            step = model(prompt[:, :1], attention_mask=torch.ones(2, 6, dtype=torch.long), cache=first.cache)
            results[n] = (model.generate(prompt, max_new_tokens=6, eos_token_id=[]), step.logits)
    assert torch.equal(results[1][0], results[3][0])
    torch.testing.assert_close(results[1][1], results[3][1], rtol=1e-10, atol=1e-10)
