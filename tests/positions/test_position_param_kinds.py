"""Every registered encoding refuses a parameter of the wrong kind by name: NaN, inf or a string for a number, a
string or number for a bool. A poisoned parameter must never reach the model as silent NaN logits."""

from __future__ import annotations

import math

import pytest

import posformer as pf
from posformer import positions

BASE = dict(vocab_size=32, d_model=16, n_layers=1, n_heads=2, max_positions=32)
BAD_BY_KIND = {
    bool: ["true", 1, None],
    int: [math.nan, math.inf, 2.5, "3", True],
    float: [math.nan, math.inf, -math.inf, "1.0", True],
    str: [1, None],
}


def kind_of(default):
    for kind in (bool, int, float, str):
        if isinstance(default, kind):
            return kind
    return None


CASES = [
    (name, key, bad)
    for name in positions.names()
    for key, default in positions.get(name).defaults.items()
    if kind_of(default) is not None
    for bad in BAD_BY_KIND[kind_of(default)]
]


@pytest.mark.parametrize("name,key,bad", CASES, ids=[f"{n}-{k}-{b!r}" for n, k, b in CASES])
def test_wrong_kind_is_refused_by_name(name, key, bad):
    arch = "decoder"
    with pytest.raises(ValueError) as info:
        pf.Config(**BASE, arch=arch, position=name, position_params={key: bad})
    assert f"position_params[{key!r}]" in str(info.value)


def test_every_encoding_with_numeric_parameters_is_covered():
    numeric = {
        name
        for name in positions.names()
        if any(kind_of(d) in (int, float) for d in positions.get(name).defaults.values())
    }
    assert numeric <= {name for name, _, _ in CASES}
    assert {"sinusoidal", "fire", "rope"} <= numeric
