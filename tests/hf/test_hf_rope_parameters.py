"""transformers v5's `rope_parameters`: a hand-written v5 config.json loads to the same model as its v4 twin (flat,
with partial rotation and LongRoPE, and nested per layer type), and `to_hf(rope_parameters=True)` writes a v5
config that loads back to the same model."""

from __future__ import annotations

import json

import pytest
import torch
from test_hf_gemma3 import _gemma3
from test_hf_llama import _llama
from test_hf_phi3 import ORIGINAL, _longrope, _phi3

import posformer as pf
from hf_oracle import padded_batch, save_hf
from posformer.cli import main


def _v5_twin(v4_dir, v5_dir, rope_parameters: dict, drop: tuple[str, ...]) -> None:
    """`v4_dir` copied to `v5_dir` with config.json rewritten: the v4 keys `drop` removed, `rope_parameters`
    added as given."""
    v5_dir.mkdir()
    for file in v4_dir.iterdir():
        (v5_dir / file.name).write_bytes(file.read_bytes())
    config = json.loads((v4_dir / "config.json").read_text())
    for key in drop:
        config.pop(key, None)
    (v5_dir / "config.json").write_text(json.dumps({**config, "rope_parameters": rope_parameters}))


def _assert_same_model(v4_dir, v5_dir) -> pf.Transformer:
    v4, v5 = pf.from_hf(v4_dir), pf.from_hf(v5_dir)
    assert v5.cfg == v4.cfg
    batch = padded_batch(97)
    torch.testing.assert_close(v5(**batch).logits, v4(**batch).logits, atol=0, rtol=0)
    return v5


def test_a_v5_llama_config_with_scaling_loads_as_its_v4_twin(tmp_path):
    v4 = save_hf(_llama(rope_theta=500.0, rope_scaling={"rope_type": "linear", "factor": 2.0}), tmp_path / "v4")
    _v5_twin(
        v4,
        tmp_path / "v5",
        {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0},
        drop=("rope_theta", "rope_scaling"),
    )
    model = _assert_same_model(v4, tmp_path / "v5")
    assert model.cfg.position_params["scaling"] == {"type": "linear", "factor": 2.0}


def test_a_v5_phi3_config_with_longrope_and_partial_rotation_loads_as_its_v4_twin(tmp_path):
    changes = _longrope(4)  # 4 of the 8 dims of a head rotate
    v4 = save_hf(_phi3(partial_rotary_factor=0.5, **changes), tmp_path / "v4")
    scaling = changes["rope_scaling"]
    _v5_twin(
        v4,
        tmp_path / "v5",
        {
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "short_factor": scaling["short_factor"],
            "long_factor": scaling["long_factor"],
            "original_max_position_embeddings": ORIGINAL,
        },
        drop=("rope_theta", "rope_scaling", "partial_rotary_factor", "original_max_position_embeddings"),
    )
    model = _assert_same_model(v4, tmp_path / "v5")
    assert model.cfg.position_params["rotary_fraction"] == 0.5


def test_a_v5_gemma3_config_nested_by_layer_type_loads_as_its_v4_twin(tmp_path):
    v4 = save_hf(_gemma3(), tmp_path / "v4")
    _v5_twin(
        v4,
        tmp_path / "v5",
        {
            "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
        },
        drop=("rope_theta", "rope_scaling", "rope_local_base_freq"),
    )
    _assert_same_model(v4, tmp_path / "v5")


@pytest.mark.parametrize(
    "hf_model",
    [
        lambda: _llama(rope_theta=500.0, rope_scaling={"rope_type": "yarn", "factor": 2.0}),
        lambda: _phi3(partial_rotary_factor=0.5, **_longrope(4)),
        _gemma3,
    ],
    ids=["llama-yarn", "phi3-longrope-partial", "gemma3-nested"],
)
def test_to_hf_writes_v5_rope_parameters_that_load_back(tmp_path, hf_model):
    model = pf.from_hf(save_hf(hf_model(), tmp_path / "hf"))
    pf.to_hf(model, tmp_path / "v4")
    pf.to_hf(model, tmp_path / "v5", rope_parameters=True)
    written = json.loads((tmp_path / "v5" / "config.json").read_text())
    assert {"rope_theta", "rope_scaling", "rope_local_base_freq", "partial_rotary_factor"}.isdisjoint(written)
    reloaded = _assert_same_model(tmp_path / "v4", tmp_path / "v5")
    batch = padded_batch(97)
    torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits, atol=0, rtol=0)


def test_the_convert_command_writes_v5_on_request(tmp_path, capsys):
    v4 = save_hf(_llama(rope_theta=500.0), tmp_path / "hf")
    assert main(["convert", "--from-hf", str(v4), "--out", str(tmp_path / "ours")]) == 0
    assert main(["convert", "--to-hf", str(tmp_path / "ours"), "--rope-parameters", "--out", str(tmp_path / "v5")]) == 0
    written = json.loads((tmp_path / "v5" / "config.json").read_text())
    assert written["rope_parameters"] == {"rope_type": "default", "rope_theta": 500.0}


def test_v5_form_is_refused_for_a_family_without_rope(tmp_path):
    model = pf.Transformer(
        pf.Config.preset("bert", vocab_size=97, n_layers=1, d_model=32, n_heads=4, d_ff=40, hf_model_type="bert")
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=r"rope_parameters=True.*no RoPE settings"):
        pf.to_hf(model, tmp_path, rope_parameters=True)
