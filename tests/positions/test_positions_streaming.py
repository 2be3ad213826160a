"""StreamingLLM's bounded KV cache: decoding token by token with the cache that drops the keys out of the window
(`Transformer.new_cache`) gives the logits of the full pass (which hides them), for one row and for a
left-padded batch, and its memory stays bounded however many tokens it reads; generation uses it."""

from __future__ import annotations

import pytest
import torch

import posformer as pf

SINKS, WINDOW = 2, 5


def streaming_model(n_kv_heads: int = 2, **overrides) -> pf.Transformer:
    fields = dict(
        arch="decoder", vocab_size=53, d_model=32, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, init_std=0.3,
        position="streaming", position_params={"sinks": SINKS, "window": WINDOW},
    )  # fmt: skip
    return pf.Transformer(pf.Config(**{**fields, **overrides})).eval()


def token_by_token(model, ids, mask, pos, cache, prefix: int = 4) -> tuple[torch.Tensor, list[int]]:
    """Logits (B, T, V) of the prefix, then one token per step over `cache`; and the keys held after each step."""
    steps = [model(ids[:, :prefix], attention_mask=mask[:, :prefix], position_ids=pos[:, :prefix], cache=cache).logits]
    held = [len(cache)]
    for t in range(prefix, ids.shape[1]):
        out = model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], position_ids=pos[:, t : t + 1], cache=cache)
        steps.append(out.logits)
        held.append(len(cache))
    return torch.cat(steps, dim=1), held


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("padded", [False, True])
def test_decoding_with_the_bounded_cache_equals_the_full_pass(n_kv_heads: int, padded: bool) -> None:
    model = streaming_model(n_kv_heads)
    ids = torch.randint(1, 53, (2, 60))
    mask = torch.ones(2, 60, dtype=torch.long)
    if padded:
        mask[0, :3] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(ids, attention_mask=mask, position_ids=pos).logits
        cache = model.new_cache()
        steps, held = token_by_token(model, ids, mask, pos, cache)
    real = mask.bool()
    torch.testing.assert_close(steps[real], full[real], atol=1e-5, rtol=1e-5)
    # the sinks, the window, and (padded) the left pads at position 0 of the padded row, which look like sinks
    assert max(held[1:]) <= SINKS + WINDOW + (3 if padded else 0) and cache.seen == 60
    assert cache.self_attn[0].k.shape[2] == len(cache) and cache.self_attn[0]._k.shape[2] <= 2 * (SINKS + WINDOW + 3)


def test_memory_is_bounded_however_long_the_decoding() -> None:
    """400 tokens, one at a time: the cache never holds more than sinks + window keys, nor allocates more than
    twice that; a plain cache over the same steps keeps all 400 and gives the same logits."""
    model = streaming_model()
    ids = torch.randint(1, 53, (1, 400))
    mask, pos = torch.ones_like(ids), torch.arange(400)[None]
    with torch.no_grad():
        bounded, held = token_by_token(model, ids, mask, pos, model.new_cache())
        cache = pf.Cache(model.cfg.decoder_layers)
        plain, _ = token_by_token(model, ids, mask, pos, cache)
    torch.testing.assert_close(bounded, plain, atol=1e-5, rtol=1e-5)
    assert max(held) <= SINKS + WINDOW and len(cache) == 400


def test_generation_decodes_over_the_bounded_cache_as_the_full_pass_reads() -> None:
    """Greedy generation of 40 tokens: each one is the full pass's argmax over what came before it."""
    model = streaming_model()
    prompt = torch.randint(1, 53, (1, 6))
    out = model.generate(prompt, max_new_tokens=40)
    with torch.no_grad():
        greedy = model(out).logits.argmax(-1)
    assert out.shape == (1, 46) and torch.equal(greedy[0, 5:-1], out[0, 6:])


def test_only_streaming_without_a_sliding_window_gets_a_cache_that_drops_keys() -> None:
    assert streaming_model().new_cache().keys_seen is not None
    assert streaming_model(sliding_window=8).new_cache().keys_seen is None  # its mask counts the cache's slots
    for name in ("rope", "rerope"):
        assert streaming_model(position=name, position_params={}).new_cache(64).keys_seen is None


def test_beam_search_of_a_left_padded_batch_over_the_bounded_cache_equals_it_over_every_key(monkeypatch) -> None:
    """Beams reorder the cache's rows; the slots dropped are shared by the rows, so the result is that of a cache
    that keeps every key (the full pass's hiding)."""
    model = streaming_model()
    ids = torch.randint(1, 53, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])
    bounded = model.generate(ids, attention_mask=mask, max_new_tokens=30, num_beams=3)
    monkeypatch.setattr(model.decoder, "keys_seen", lambda: None)
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=30, num_beams=3), bounded)
