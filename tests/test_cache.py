"""The preallocated KV cache: what it returns equals the concatenation of the steps (torch.cat), it
allocates once when given the room, grows geometrically when not, and beam-search reordering selects rows."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import posformer as pf
from posformer.generation import Decoding
from posformer.modules.cache import LayerCache
from tests.conftest import tiny

BATCH, HEADS, DIM = 3, 2, 4


def step(length: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random k, v (B, Hkv, length, dh) and positions (B, length) counting from `start`."""
    k, v = torch.randn(BATCH, HEADS, length, DIM), torch.randn(BATCH, HEADS, length, DIM)
    pos = torch.arange(start, start + length).expand(BATCH, length)
    return k, v, pos


def storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=12), capacity=st.one_of(st.none(), st.integers(0, 40)))
def test_appended_steps_equal_their_concatenation(lengths: list[int], capacity: int | None) -> None:
    cache = LayerCache(capacity)
    ks, vs, ps = [], [], []
    for length in lengths:
        k, v, pos = step(length, start=len(cache))
        ks, vs, ps = ks + [k], vs + [v], ps + [pos]
        got_k, got_v, got_pos = cache.append(k, v, pos)
        assert torch.equal(got_k, torch.cat(ks, dim=2)) and torch.equal(got_v, torch.cat(vs, dim=2))
        assert torch.equal(got_pos, torch.cat(ps, dim=1))
        assert len(cache) == sum(p.shape[1] for p in ps)


def test_enough_capacity_allocates_once() -> None:
    cache = LayerCache(capacity=20)
    first = cache.append(*step(5))
    for t in range(5, 20):
        later = cache.append(*step(1, start=t))
        assert all(storage(a) == storage(b) for a, b in zip(first, later))


def test_without_capacity_the_buffers_grow_geometrically() -> None:
    """Room doubles when full: few distinct buffer sizes for 100 steps, and never more than twice the need."""
    cache = LayerCache()
    sizes = set()
    for t in range(100):
        k = cache.append(*step(1, start=t))[0]
        room = k.untyped_storage().nbytes() // (k.element_size() * BATCH * HEADS * DIM)
        assert len(cache) <= room <= 2 * len(cache)
        sizes.add(room)
    assert sizes == {2**i for i in range(8)}  # 1, 2, 4, ..., 128


def test_reorder_selects_rows_then_keeps_appending() -> None:
    cache = LayerCache(capacity=8)
    k, v, pos = step(4)
    cache.append(k, v, pos)
    index = torch.tensor([2, 2, 0, 1])  # the batch grows, as when beam search starts
    cache.reorder(index)
    new_k, new_v = torch.randn(4, HEADS, 1, DIM), torch.randn(4, HEADS, 1, DIM)
    got_k, got_v, got_pos = cache.append(new_k, new_v, torch.full((4, 1), 4))
    assert torch.equal(got_k, torch.cat((k[index], new_k), dim=2))
    assert torch.equal(got_v, torch.cat((v[index], new_v), dim=2))
    assert torch.equal(got_pos, torch.cat((pos[index], torch.full((4, 1), 4)), dim=1))


def test_generation_allocates_the_cache_once() -> None:
    """Decoding sizes the cache for the prompt and max_new_tokens: no step reallocates it."""
    model = pf.Transformer(tiny("decoder", position="rope", n_kv_heads=2)).eval()
    state = Decoding(model, torch.randint(1, 61, (2, 5)), None, max_new_tokens=6)
    with torch.no_grad():
        logits = state.start()
        first = [storage(layer.k) for layer in state.cache.self_attn]
        for _ in range(6):
            logits = state.step(logits.argmax(-1))
    assert [storage(layer.k) for layer in state.cache.self_attn] == first
    assert len(state.cache) == 11


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: pf.Cache(0), "n_layers"),
        (lambda: pf.Cache(2, capacity=-1), "capacity"),
        (lambda: pf.Cache(2, capacity=4.0), "capacity"),
    ],
)
def test_bad_sizes_name_the_field(make, field: str) -> None:
    with pytest.raises(ValueError, match=f"{field}=.* is invalid"):
        make()


def test_a_step_of_another_batch_size_is_refused() -> None:
    cache = LayerCache()
    cache.append(*step(2))
    with pytest.raises(ValueError, match=r"batch\)=1 is invalid: expected the cache's batch size 3"):
        cache.append(torch.randn(1, HEADS, 1, DIM), torch.randn(1, HEADS, 1, DIM), torch.zeros(1, 1))
