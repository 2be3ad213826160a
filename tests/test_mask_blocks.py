"""Attention under a mask with a rule in blocks of queries (`ops.mask_blocks`): the same logits and gradients as
SDPA over the whole mask, for sliding windows, chunks, left padding, packed documents and GQA (in float64, where
only the order of the sums differs), and a mask that is never held whole."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.ops import mask_blocks


def _config(**fields) -> pf.Config:
    base = dict(
        arch="decoder", vocab_size=61, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, position="rope",
        init_std=0.3, max_positions=64,
    )  # fmt: skip
    return pf.Config(**{**base, **fields})


def _logits_and_grads(model: pf.Transformer, kwargs: dict, blocks: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(mask_blocks, "BLOCK_ROWS", 5 if blocks else 10**9)
    monkeypatch.setattr(mask_blocks, "WHOLE_MASK_MAX_BYTES", 0)
    model.zero_grad()
    logits = model(**kwargs).logits
    keep = kwargs.get("attention_mask", torch.ones(logits.shape[:2], dtype=torch.long))[..., None]
    (logits * keep).square().sum().backward()
    return logits * keep, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize(
    "fields, padded, documents",
    [
        ({"sliding_window": 6}, False, False),
        ({"sliding_window": 6}, True, False),
        ({"attention_chunk": 7}, True, False),
        ({"attention_chunk": 7}, False, True),
        ({}, True, False),
        ({"arch": "encoder", "head": "masked_lm"}, True, False),
    ],
    ids=["window", "window-left-padded", "chunk-left-padded", "chunk-documents", "padding", "encoder-padding"],
)
def test_blocks_of_queries_give_the_whole_masks_logits_and_gradients(fields, padded, documents, monkeypatch):
    torch.manual_seed(0)
    model = pf.Transformer(_config(**fields)).double()
    ids = torch.randint(1, 61, (2, 23))
    kwargs: dict = {"input_ids": ids}
    if padded:
        mask = torch.ones_like(ids)
        mask[1, :4] = 0
        kwargs["attention_mask"] = mask
    if documents:
        kwargs["document_ids"] = torch.tensor([[0] * 9 + [1] * 14, [0] * 17 + [1] * 6])
    whole, whole_grads = _logits_and_grads(model, kwargs, False, monkeypatch)
    blocked, blocked_grads = _logits_and_grads(model, kwargs, True, monkeypatch)
    torch.testing.assert_close(blocked, whole, rtol=1e-10, atol=1e-10)
    for got, expected in zip(blocked_grads, whole_grads):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_a_blocked_forward_never_builds_the_whole_mask(monkeypatch):
    """Each block asks the rule for its own rows over the keys it may see; with a window of 6 and blocks of 5 rows
    no block reads more than 10 keys."""
    torch.manual_seed(0)
    monkeypatch.setattr(mask_blocks, "BLOCK_ROWS", 5)
    monkeypatch.setattr(mask_blocks, "WHOLE_MASK_MAX_BYTES", 0)
    seen = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        seen.append((q.shape[-2], k.shape[-2]))
        return original(q, k, v, **kwargs)

    monkeypatch.setattr(mask_blocks.F, "scaled_dot_product_attention", spy)
    model = pf.Transformer(_config(sliding_window=6)).eval()
    mask = torch.ones(1, 40, dtype=torch.long)
    mask[0, :3] = 0
    model(torch.randint(1, 61, (1, 40)), attention_mask=mask)
    assert seen and max(keys for _, keys in seen) <= 10 and max(rows for rows, _ in seen) <= 5


def test_a_bidirectional_window_reads_keys_on_both_sides_only_within_the_window(monkeypatch):
    """An encoder's window W (ModernBERT's local layers): a block of 5 queries reads at most 5 + 2 (W - 1) keys."""
    monkeypatch.setattr(mask_blocks, "BLOCK_ROWS", 5)
    monkeypatch.setattr(mask_blocks, "WHOLE_MASK_MAX_BYTES", 0)
    seen = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        seen.append(k.shape[-2])
        return original(q, k, v, **kwargs)

    monkeypatch.setattr(mask_blocks.F, "scaled_dot_product_attention", spy)
    model = pf.Transformer(_config(arch="encoder", head="masked_lm", sliding_window=4)).eval()
    mask = torch.ones(1, 40, dtype=torch.long)
    mask[0, -3:] = 0
    model(torch.randint(1, 61, (1, 40)), attention_mask=mask)
    assert seen and max(seen) <= 5 + 2 * 3
