"""Position parameters belong to the encoding: one place resolves them, and a swap starts afresh."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pytest
import torch
import yaml

import posformer as pf
from posformer.positions.contract import Rescalable
from tests.conftest import tiny


def test_swapping_a_presets_encoding_starts_from_the_new_defaults():
    llama = pf.Config.preset("llama")
    for swapped in (
        pf.Config.preset("llama", position="alibi"),
        llama.replace(position="alibi"),
        dataclasses.replace(llama, position="alibi"),
    ):
        assert swapped.position == "alibi" and dict(swapped.position_params) == {}
        assert (swapped.norm, swapped.activation, swapped.d_ff) == (llama.norm, llama.activation, llama.d_ff)
    t5 = pf.Config.preset("llama", position="t5")
    assert dict(t5.position_params) == pf.positions.get("t5").defaults


def test_params_are_resolved_with_the_encodings_defaults():
    cfg = pf.Config.preset("llama", position_params={"theta": 5.0e5})
    assert dict(cfg.position_params) == {**pf.positions.get("rope").defaults, "theta": 5.0e5}
    assert cfg.replace(n_layers=3).position_params["theta"] == 5.0e5  # same encoding: the values stay


def test_a_plain_dict_is_checked_strictly():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['theta'\] for position='alibi'"):
        pf.Config(position="alibi", position_params={"theta": 1.0})
    with pytest.raises(ValueError, match="position_params"):
        pf.Config(position="rope", position_params=[("theta", 1.0)])


def test_resolved_params_round_trip_as_plain_data(tmp_path):
    cfg = pf.Config.preset("t5", d_model=64, n_heads=4, d_head=16)
    data = cfg.to_dict()
    assert type(data["position_params"]) is dict
    yaml.safe_dump(data)  # a dict subclass would make safe_dump fail
    assert pf.Config.from_dict(json.loads(json.dumps(data))) == cfg
    for path in (tmp_path / "c.yaml", tmp_path / "c.json"):
        cfg.save(path)
        assert pf.Config.load(path) == cfg
    for copied in (copy.deepcopy(cfg), pickle.loads(pickle.dumps(cfg))):
        assert copied == cfg and copied.replace(position="alibi").position_params == {}


def test_max_length_is_the_encodings_own_limit():
    assert pf.positions.get("learned").max_length({"offset": 2}, max_positions=40) == 38
    model = pf.Transformer(tiny(position="learned", max_positions=40, position_params={"offset": 2}))
    model(torch.zeros(1, 38, dtype=torch.long))
    with pytest.raises(ValueError, match="beyond the learned position table of 38 positions"):
        model(torch.zeros(1, 39, dtype=torch.long))
    for name in pf.positions.names():
        if pf.positions.get(name).extrapolates:
            cfg = tiny(position=name)
            assert pf.positions.get(name).max_length(cfg.position_params, cfg.max_positions) is None


def test_rescaled_params_extend_rope_and_are_refused_elsewhere():
    rope = pf.positions.get("rope")
    rescalable = [name for name in pf.positions.names() if isinstance(pf.positions.get(name), Rescalable)]
    assert rescalable == ["hope", "rope"]  # HoPE is RoPE with its low frequencies stopped
    params = rope.rescaled_params(rope.resolve_params({"theta": 500.0}), "yarn", 256, 64)
    assert params["theta"] == 500.0
    assert params["scaling"] == {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    pf.Transformer(tiny(position="rope", position_params=params))  # a valid config
    for kind in rope.scalings:
        tiny(position="rope", position_params=rope.rescaled_params(rope.defaults, kind, 128, 64))
    with pytest.raises(ValueError, match="no context-extension method 'longrope'; its methods: linear, ntk"):
        rope.rescaled_params(rope.defaults, "longrope", 128, 64)  # LongRoPE needs its searched factors


def test_alibi_distance_bias_is_its_attention_bias():
    position = pf.Transformer(tiny(position="alibi")).decoder.position
    pos = torch.arange(7)[None]
    bias = position.bias(None, None, pos, pos, 0)[0]  # (H, T, T): bias[h, i, j] at rel = j - i
    rel = torch.arange(-6, 7)
    table = position.distance_bias(rel)  # (H, 13)
    for i in range(7):
        for j in range(7):
            torch.testing.assert_close(bias[:, i, j], table[:, j - i + 6])


def test_a_run_configs_preset_takes_another_encoding():
    from posformer.tasks.causal_lm import build_model

    fields = {"preset": "llama", "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64, "position": "t5"}
    cfg = build_model(fields, vocab_size=50, seq_len=16).cfg
    assert cfg.position == "t5" and dict(cfg.position_params) == pf.positions.get("t5").defaults
    assert (cfg.norm, cfg.activation, cfg.max_positions) == ("rmsnorm", "swiglu", 4096)
