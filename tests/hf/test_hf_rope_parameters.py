"""transformers v5's `rope_parameters`: a hand-written v5 config.json loads to the same model as its v4 twin (flat,
with partial rotation and LongRoPE, and nested per layer type: Gemma 3, ModernBERT), `to_hf(rope_parameters=True)`
writes a v5 config that loads back to the same model, and what would leave a layer on another RoPE than the config
says (an unknown rope_type in any entry, an entry for a layer type the config does not have, flat keys mixed with
entries by layer type) is refused by name."""

from __future__ import annotations

import json

import pytest
import torch
from test_hf_gemma3 import _gemma3
from test_hf_llama import _llama
from test_hf_modernbert import _modernbert
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


def test_a_v5_modernbert_config_nested_by_layer_type_loads_as_its_v4_twin(tmp_path):
    """transformers 4.57.6's `global_rope_theta` / `local_rope_theta` / `global_attn_every_n_layers` against 5's
    `rope_parameters` and `layer_types`, a scaling in both entries."""
    v4 = save_hf(_modernbert(rope_scaling={"rope_type": "linear", "factor": 2.0}), tmp_path / "v4")
    v4_config = json.loads((v4 / "config.json").read_text())
    for key, value in {"global_rope_theta": 1000.0, "local_rope_theta": 20.0, "global_attn_every_n_layers": 3}.items():
        v4_config.setdefault(key, value)  # transformers 5 saves its own form: write 4.57.6's
    v4_config.pop("rope_parameters", None)
    v4_config.pop("layer_types", None)
    (v4 / "config.json").write_text(json.dumps({**v4_config, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}))
    (tmp_path / "v5").mkdir()
    for file in v4.iterdir():
        (tmp_path / "v5" / file.name).write_bytes(file.read_bytes())
    v5_config = {k: v for k, v in v4_config.items() if "rope" not in k and k != "global_attn_every_n_layers"}
    v5_config["layer_types"] = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    v5_config["rope_parameters"] = {
        "full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0},
        "sliding_attention": {"rope_type": "linear", "rope_theta": 20.0, "factor": 2.0},
    }
    (tmp_path / "v5" / "config.json").write_text(json.dumps(v5_config))
    model = _assert_same_model(v4, tmp_path / "v5")
    assert [block.attn.position.params["theta"] for block in model.encoder.layers] == [1000.0, 20.0, 20.0, 1000.0]


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
        _modernbert,
    ],
    ids=["llama-yarn", "phi3-longrope-partial", "gemma3-nested", "modernbert-nested"],
)
def test_to_hf_writes_v5_rope_parameters_that_load_back(tmp_path, hf_model):
    model = pf.from_hf(save_hf(hf_model(), tmp_path / "hf"))
    pf.to_hf(model, tmp_path / "v4")
    pf.to_hf(model, tmp_path / "v5", rope_parameters=True)
    written = json.loads((tmp_path / "v5" / "config.json").read_text())
    v4_keys = ("rope_theta", "rope_scaling", "rope_local_base_freq", "global_rope_theta", "local_rope_theta")
    assert {*v4_keys, "partial_rotary_factor"}.isdisjoint(written) and written["rope_parameters"]
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


GEMMA3_NESTED = {
    "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
}


@pytest.mark.parametrize(
    "layer_types, rope_parameters, message",
    [
        (
            None,
            {**GEMMA3_NESTED, "sliding_attention": {"rope_type": "unknown"}},
            r"\['sliding_attention'\] of rope_type 'unknown'",
        ),
        (
            ["full_attention"] * 4,  # no sliding layer reads the entry: refused all the same
            {**GEMMA3_NESTED, "sliding_attention": {"rope_type": "unknown"}},
            r"\['sliding_attention'\] of rope_type 'unknown'",
        ),
        (
            None,
            {**GEMMA3_NESTED, "sliding_atention": {"rope_type": "default"}},
            r"\['sliding_atention'\], an entry for a layer type",
        ),
        (None, {**GEMMA3_NESTED, "rope_theta": 5.0}, r"mix flat keys \(rope_theta\) with entries by layer type"),
    ],
    ids=["unknown-type", "unknown-type-unread", "unknown-layer-type", "mixed"],
)
def test_a_nested_rope_parameters_that_would_mislead_is_refused_by_name(
    tmp_path, layer_types, rope_parameters, message
):
    changes = {} if layer_types is None else {"layer_types": layer_types}
    v4 = save_hf(_gemma3(**changes), tmp_path / "v4")
    _v5_twin(v4, tmp_path / "v5", rope_parameters, drop=("rope_theta", "rope_scaling", "rope_local_base_freq"))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=message):
        pf.from_hf(tmp_path / "v5")


def test_a_flat_rope_parameters_of_an_unknown_type_is_refused_by_name(tmp_path):
    v4 = save_hf(_llama(rope_theta=500.0), tmp_path / "v4")
    _v5_twin(v4, tmp_path / "v5", {"rope_type": "unknown", "rope_theta": 500.0}, drop=("rope_theta", "rope_scaling"))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=r"rope_parameters of rope_type 'unknown'"):
        pf.from_hf(tmp_path / "v5")
