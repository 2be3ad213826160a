"""Fuzzing `Config`: any mix of valid and poisoned field values is a `ValueError` naming a field, or a model whose
logits are finite. Poison: NaN, inf, strings, bools, None, containers, zero, negatives, for any field."""

from __future__ import annotations

import dataclasses
import math

import torch
from fuzz_profiles import fuzz
from hypothesis import given
from hypothesis import strategies as st

import posformer as pf
from posformer import positions
from posformer.config.checks import ACTIVATIONS, ARCHS, NORM_PLACEMENTS, NORMS

BASE = dict(vocab_size=32, d_model=16, n_layers=1, n_heads=2, d_ff=24, max_positions=16)
POISON = [
    math.nan,
    math.inf,
    -math.inf,
    -1,
    0,
    1,
    2,
    3,
    0.5,
    -0.5,
    1e-9,
    True,
    False,
    None,
    "",
    "x",
    "1",
    [],
    {},
    [1],
    {"a": 1},
]
SENSIBLE = {  # values a field can really take, drawn as often as the poison
    "arch": list(ARCHS),
    "norm": list(NORMS),
    "norm_placement": list(NORM_PLACEMENTS),
    "activation": list(ACTIVATIONS),
    "position": positions.names(),
    "attn_impl": ["sdpa", "eager"],
    "n_heads": [1, 2, 4],
    "n_kv_heads": [None, 1, 2],
    "d_head": [None, 4, 8],
    "n_layers": [1, 2],
    "max_positions": [8, 16, 64],
    "sliding_window": [None, 2, 4],
    "type_vocab_size": [0, 2],
    "head": [None, "classification", "span_qa", "causal_lm", "masked_lm", "none"],
    "decoder_start_token_id": [None, 0, 1, 40],
    "pad_token_id": [None, 0, 40],
    "init": ["normal", "t5"],
    "dropout": [0.0, 0.1],
    "attention_dropout": [0.0, 0.1],
    "norm_eps": [1e-6, 1e-5],
    "init_std": [0.02, 0.5],
    "attn_scale": [None, 0.25, 2.0],
    "num_labels": [1, 3],
    "random_positions": [None, 32],
    "query_temperature": [None, {"scale": 0.1, "floor_size": 4}],
}
FIELDS = [f.name for f in dataclasses.fields(pf.Config)]
for f in dataclasses.fields(pf.Config):
    if f.type in ("bool", "bool | None"):
        SENSIBLE[f.name] = [True, False] + ([None] if "None" in f.type else [])


@st.composite
def field_value(draw, name: str):
    """A sensible value seven times in ten (so that many configs build a model), else poison."""
    if name in SENSIBLE and draw(st.integers(0, 9)) < 7:
        return draw(st.sampled_from(SENSIBLE[name]))
    return draw(st.sampled_from(POISON))


@st.composite
def config_fields(draw) -> dict:
    names = draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4, unique=True))
    fields = {**BASE, **{name: draw(field_value(name)) for name in names}}
    if draw(st.booleans()):
        position = draw(st.sampled_from(positions.names()))
        params = positions.get(position).defaults
        if params:
            key = draw(st.sampled_from(sorted(params)))
            fields.update(position=position, position_params={key: draw(st.sampled_from(POISON))})
    return fields


def run_tiny_input(model: pf.Transformer) -> None:
    """A forward pass on a short input: finite outputs, or a ValueError about an input this model cannot take."""
    cfg = model.cfg
    ids = torch.randint(0, cfg.vocab_size, (2, 5))
    extra = {"decoder_input_ids": ids[:, :3]} if cfg.arch == "encoder_decoder" else {}
    try:
        out = model(ids, **extra)
    except ValueError as err:
        assert str(err)
        return
    for value in (out.logits, out.start_logits, out.end_logits, out.last_hidden_state):
        if value is not None:
            assert torch.isfinite(value).all(), f"non-finite outputs from {cfg}"


@fuzz(150)
@given(config_fields())
def test_any_config_is_refused_by_name_or_works(fields: dict) -> None:
    try:
        cfg = pf.Config(**fields)
    except ValueError as err:
        message = str(err)
        assert "Config" in message or "position_params" in message, message
        return
    torch.manual_seed(0)
    try:
        model = pf.Transformer(cfg).eval()
    except ValueError as err:  # a part refusing the combination, by name
        assert str(err)
        return
    run_tiny_input(model)


@fuzz(60)
@given(config_fields())
def test_accepted_configs_round_trip(fields: dict) -> None:
    """What `Config` accepts, `to_dict` / `from_dict` gives back equal: no value that validates once but not twice."""
    try:
        cfg = pf.Config(**fields)
    except ValueError:
        return
    assert pf.Config.from_dict(cfg.to_dict()) == cfg
