"""What a position encoding computes from positions alone is computed once per forward, not once per layer.

`test_positions_conformance` proves that this sharing changes no output or gradient; here, that it happens.
"""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.positions.alibi import ALiBi
from posformer.positions.fire import FIRE
from posformer.positions.per_forward import batch_rows
from posformer.positions.relative_bert import RelativeKey
from posformer.positions.rotary import Rotary
from posformer.positions.t5 import T5Bias

LAYERS = 4
# (encoding, the method that computes its per-forward value from positions)
COMPUTES = [
    ("alibi", ALiBi, "_bias"),
    ("t5", T5Bias, "buckets"),
    ("fire", FIRE, "normalized_distance"),
    ("relative_key", RelativeKey, "_distance_span"),
    ("rope", Rotary, "_tables"),
]


@pytest.mark.parametrize("name, cls, method", COMPUTES, ids=[c[0] for c in COMPUTES])
def test_a_forward_computes_the_shared_value_once(name, cls, method, monkeypatch) -> None:
    seen: list[tuple[int, ...]] = []
    original = getattr(cls, method)

    def counted(self, q_pos, k_pos, *rest):
        seen.append(tuple(q_pos.shape))
        return original(self, q_pos, k_pos, *rest)

    monkeypatch.setattr(cls, method, counted)
    cfg = pf.Config(
        arch="decoder", vocab_size=31, d_model=32, n_layers=LAYERS, n_heads=4, d_ff=48, position=name, max_positions=16
    )
    model = pf.Transformer(cfg)
    model(torch.randint(0, 31, (3, 9)))
    assert seen == [(1, 9)]  # once for the four layers, from one row of the default positions
    seen.clear()
    model(torch.randint(0, 31, (3, 9)), position_ids=torch.arange(9).repeat(3, 1))
    assert seen == [(3, 9)]  # explicit positions: every row


def test_outside_a_forward_every_call_computes() -> None:
    cfg = pf.Config(arch="decoder", vocab_size=31, d_model=32, n_layers=2, n_heads=4, d_ff=48, position="alibi")
    encoding = pf.Transformer(cfg).decoder.position
    pos = torch.arange(5)[None]
    q = torch.zeros(1, 4, 5, 8)
    assert encoding.bias(q, q, pos, pos, 0) is not encoding.bias(q, q, pos, pos, 1)
    with encoding.forward_scope():
        first = encoding.bias(q, q, pos, pos, 0)
        assert encoding.bias(q, q, pos, pos, 1) is first
        assert encoding.bias(q, q, pos.clone(), pos, 1) is not first  # other positions: computed anew
    assert encoding._per_forward is None


def test_batch_rows_takes_one_row_only_when_the_rows_are_one_by_construction() -> None:
    repeated = torch.arange(6).expand(4, 6)
    assert batch_rows(repeated).shape == (1, 6)
    copied = repeated.clone()
    assert batch_rows(copied) is copied
    single = torch.arange(6)[None]
    assert batch_rows(single) is single


def test_a_range_is_read_from_a_wider_one_and_grows_by_doubling() -> None:
    """per_forward_range: the values of a range equal computing them directly; ranges that grow one block at a
    time (a long causal forward) are computed O(log) times; under gradients, or outside a forward, every call
    computes."""
    from posformer.positions.per_forward import PerForward

    def squares(low: int, high: int) -> torch.Tensor:
        return torch.arange(low, high + 1, dtype=torch.float64)[:, None] ** 2

    computed = []

    def counted(low: int, high: int) -> torch.Tensor:
        computed.append((low, high))
        return squares(low, high)

    memo = PerForward()
    with torch.no_grad(), memo.forward_scope():
        for end in range(16, 1025, 16):  # the distances 0 .. end - 1 of a causal block ending at `end`
            torch.testing.assert_close(memo.per_forward_range("r", 0, end - 1, counted), squares(0, end - 1))
        torch.testing.assert_close(memo.per_forward_range("r", -40, 10, counted), squares(-40, 10))
    assert computed == [(0, 15), (0, 31), (0, 63), (0, 127), (0, 255), (0, 511), (0, 1023), (-1024, 1023)]
    computed.clear()
    with torch.no_grad():
        memo.per_forward_range("r", 0, 3, counted)
    with memo.forward_scope():  # gradients on
        memo.per_forward_range("r", 0, 3, counted)
        memo.per_forward_range("r", 0, 3, counted)
    assert len(computed) == 3
