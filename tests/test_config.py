"""Config: round trips, validation messages and forward-time input errors (presets: test_presets.py)."""

from __future__ import annotations

import json

import pytest
import torch

import posformer as pf
from posformer.config import checks as config_module

TINY = dict(vocab_size=32, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_positions=16)

AVAILABLE_PRESETS = ["vanilla", "bert", "gpt2", "llama", "t5", "seed-encoder"]


def custom_config() -> pf.Config:
    return pf.Config(
        arch="decoder",
        vocab_size=64,
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=48,
        position="rope",
        position_params={"theta": 500000.0, "layout": "interleaved", "rotary_fraction": 0.5},
        max_positions=64,
        norm="rmsnorm",
        norm_eps=1e-6,
        norm_placement="sandwich",
        activation="geglu",
        dropout=0.1,
        attention_dropout=0.05,
        qkv_bias=False,
        attn_scale=0.25,
        attn_impl="eager",
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        init_std=0.01,
    )


def round_trip_configs() -> list[tuple[str, pf.Config]]:
    return [(name, pf.Config.preset(name)) for name in AVAILABLE_PRESETS] + [("custom", custom_config())]


# ---------------------------------------------------------------- round trips
@pytest.mark.parametrize("name,cfg", round_trip_configs(), ids=lambda v: v if isinstance(v, str) else "")
def test_dict_round_trip(name, cfg):
    data = cfg.to_dict()
    assert isinstance(data, dict)
    back = pf.Config.from_dict(data)
    assert back == cfg
    assert back.to_dict() == data
    # the dict is a copy: mutating it does not touch the config
    data["position_params"]["extra"] = 1
    assert "extra" not in cfg.position_params


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
@pytest.mark.parametrize("name,cfg", round_trip_configs(), ids=lambda v: v if isinstance(v, str) else "")
def test_file_round_trip(tmp_path, name, cfg, suffix):
    path = tmp_path / f"{name}{suffix}"
    cfg.save(path)
    assert path.is_file()
    back = pf.Config.load(path)
    assert back == cfg
    assert back.position_params == cfg.position_params
    # str paths work too
    assert pf.Config.load(str(path)) == cfg


def test_json_file_is_plain_json(tmp_path):
    cfg = custom_config()
    path = tmp_path / "cfg.json"
    cfg.save(path)
    assert json.loads(path.read_text()) == cfg.to_dict()


def test_json_without_init_field_loads_with_the_default(tmp_path):
    """A config.json written before `Config.init` existed loads as init="normal"."""
    data = pf.Config(**TINY).to_dict()
    del data["init"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert pf.Config.load(path).init == "normal"
    assert pf.Config.from_dict(data) == pf.Config(**TINY)


def test_replace_validates():
    cfg = pf.Config(**TINY)
    assert cfg.replace(n_layers=2).n_layers == 2
    with pytest.raises(ValueError, match="n_layers"):
        cfg.replace(n_layers=0)


# ---------------------------------------------------------------- validation
def check_error(kwargs: dict, field: str, value_text: str | None = None) -> str:
    with pytest.raises(ValueError) as info:
        pf.Config(**kwargs)
    message = str(info.value)
    assert field in message, message
    if value_text is not None:
        assert value_text in message, message
    return message


@pytest.mark.parametrize(
    "field", ["arch", "norm", "norm_placement", "qk_norm_over", "activation", "position", "attn_impl", "head", "init"]
)
def test_unknown_names(field):
    message = check_error({**TINY, field: "bogus_name"}, field, "'bogus_name'")
    assert f"Config.{field}=" in message


def test_unknown_norm_placement_lists_the_choices():
    message = check_error({**TINY, "norm_placement": "after"}, "norm_placement", "'after'")
    for name in ("post", "pre", "sandwich", "output"):
        assert name in message


def test_qk_norm_over_other_than_head_needs_qk_norm():
    message = check_error({**TINY, "qk_norm_over": "projection"}, "Config.qk_norm_over", "'projection'")
    assert "qk_norm=True" in message
    assert pf.Config(**TINY, qk_norm=True, qk_norm_over="projection").qk_norm_over == "projection"


def test_unknown_name_lists_the_choices():
    message = check_error({**TINY, "activation": "tanhh"}, "activation", "'tanhh'")
    for name in config_module.ACTIVATIONS:
        assert name in message
    message = check_error({**TINY, "position": "alibi2"}, "position", "'alibi2'")
    for name in pf.positions.names():
        assert name in message


def test_d_model_not_divisible_by_n_heads():
    message = check_error({**TINY, "d_model": 24, "n_heads": 5}, "n_heads", "5")
    assert "d_model" in message and "24" in message


def test_d_head_allows_any_d_model():
    cfg = pf.Config(**{**TINY, "d_model": 24, "n_heads": 5, "d_head": 4})
    assert cfg.head_dim == 4


def test_n_heads_not_divisible_by_n_kv_heads():
    message = check_error({**TINY, "d_model": 16, "n_heads": 4, "n_kv_heads": 3}, "n_kv_heads", "3")
    assert "n_heads" in message and "4" in message


@pytest.mark.parametrize(
    "d_model,n_heads,params,bad",
    [
        (24, 4, {"rotary_fraction": 0.5}, "0.5"),  # head_dim 6 -> 3 rotary dims
        (20, 4, {}, "1.0"),  # head_dim 5, full rotary -> 5
        (16, 4, {"rotary_fraction": 0.25}, "0.25"),  # head_dim 4 -> 1
        (16, 4, {"rotary_fraction": 0.1}, "0.1"),  # head_dim 4 -> 0
    ],
)
def test_odd_or_zero_rotary_dimension(d_model, n_heads, params, bad):
    message = check_error(
        {**TINY, "d_model": d_model, "n_heads": n_heads, "position": "rope", "position_params": params},
        "position_params",
        bad,
    )
    assert "rotary_fraction" in message


def test_even_rotary_dimension_is_accepted():
    cfg = pf.Config(
        **{**TINY, "d_model": 32, "n_heads": 4, "position": "rope", "position_params": {"rotary_fraction": 0.25}}
    )
    assert cfg.head_dim == 8


@pytest.mark.parametrize(
    "field,value",
    [
        ("vocab_size", 0),
        ("d_model", -1),
        ("n_layers", 0),
        ("d_ff", 0),
        ("n_heads", 0),
        ("n_kv_heads", 0),
        ("n_decoder_layers", 0),
        ("max_positions", 0),
        ("d_head", -4),
        ("num_labels", 0),
    ],
)
def test_non_positive_sizes(field, value):
    message = check_error({**TINY, field: value}, field, repr(value))
    assert "positive integer" in message


@pytest.mark.parametrize(
    "field,value",
    [("d_model", 16.0), ("n_layers", True), ("vocab_size", "64"), ("d_ff", float("inf")), ("n_kv_heads", 2.0)],
)
def test_sizes_that_are_not_integers(field, value):
    message = check_error({**TINY, field: value}, field, repr(value))
    assert "integer" in message


@pytest.mark.parametrize(
    "field", ["tie_embeddings", "qkv_bias", "norm_bias", "qk_norm", "parallel_residual", "final_norm", "head_bias"]
)
@pytest.mark.parametrize("value", ["false", "no", 0, 1, None])
def test_bool_fields_take_only_bools(field, value):
    if value is None and field == "final_norm":
        assert pf.Config(**{**TINY, field: value}).final_norm is None
        return
    message = check_error({**TINY, field: value}, field, repr(value))
    assert "true or false" in message


@pytest.mark.parametrize(
    "field,value",
    [("init_std", float("inf")), ("norm_eps", float("nan")), ("attn_scale", float("inf")), ("dropout", "0.1")],
)
def test_float_fields_take_only_finite_numbers(field, value):
    check_error({**TINY, field: value}, field, repr(value))


@pytest.mark.parametrize("field", ["dropout", "attention_dropout", "activation_dropout"])
@pytest.mark.parametrize("value", [1.0, -0.1, 1.5, float("nan")])
def test_dropout_outside_unit_interval(field, value):
    check_error({**TINY, field: value}, field, repr(value))


@pytest.mark.parametrize("value", [0.0, 0.5, 0.999])
def test_dropout_inside_unit_interval(value):
    assert pf.Config(**TINY, dropout=value).dropout == value


@pytest.mark.parametrize("position", ["sinusoidal", "rope", "learned", "none"])
def test_unknown_position_params_key(position):
    message = check_error(
        {**TINY, "position": position, "position_params": {"bogus_key": 1}}, "position_params", "bogus_key"
    )
    assert position in message


def test_bad_position_param_values():
    check_error({**TINY, "position": "rope", "position_params": {"layout": "diagonal"}}, "position_params", "diagonal")
    check_error({**TINY, "position": "rope", "position_params": {"theta": 0.5}}, "position_params", "0.5")
    check_error({**TINY, "position": "sinusoidal", "position_params": {"base": 1}}, "position_params", "1")
    check_error({**TINY, "position": "xpos", "position_params": {"scale_base": 1e-30}}, "position_params", "1e-30")
    check_error({**TINY, "position_params": [1, 2]}, "position_params", "[1, 2]")


def test_other_field_checks():
    check_error({**TINY, "norm": "deepnorm", "norm_placement": "pre"}, "norm_placement", "'pre'")
    check_error({**TINY, "type_vocab_size": -1}, "type_vocab_size", "-1")
    check_error({**TINY, "norm_eps": 0.0}, "norm_eps", "0.0")
    check_error({**TINY, "init_std": -1.0}, "init_std", "-1.0")
    check_error({**TINY, "norm": "deepnorm", "norm_placement": "post", "init": "t5"}, "init", "'t5'")
    check_error({**TINY, "attn_scale": 0.0}, "attn_scale", "0.0")
    check_error({**TINY, "pad_token_id": True}, "pad_token_id", "True")
    check_error({**TINY, "eos_token_id": -1}, "eos_token_id", "-1")
    check_error({**TINY, "arch": "decoder", "head": "seq2seq_lm"}, "head", "seq2seq_lm")
    check_error({**TINY, "d_model": 15, "n_heads": 3, "position": "sinusoidal"}, "d_model", "15")


def test_from_dict_unknown_field():
    data = pf.Config(**TINY).to_dict()
    data["n_hedas"] = 4
    with pytest.raises(ValueError, match="n_hedas"):
        pf.Config.from_dict(data)


def test_from_dict_validates():
    data = pf.Config(**TINY).to_dict()
    data["n_heads"] = 5
    with pytest.raises(ValueError, match="n_heads"):
        pf.Config.from_dict(data)


def test_load_missing_file(tmp_path):
    path = tmp_path / "nowhere" / "missing.json"
    with pytest.raises(FileNotFoundError) as info:
        pf.Config.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("suffix", [".txt", ".toml", ""])
def test_bad_suffix(tmp_path, suffix):
    cfg = pf.Config(**TINY)
    path = tmp_path / f"cfg{suffix}"
    with pytest.raises(ValueError, match="suffix"):
        cfg.save(path)
    assert not path.exists()
    path.write_text(json.dumps(cfg.to_dict()))
    with pytest.raises(ValueError, match="suffix"):
        pf.Config.load(path)


def test_load_non_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="mapping"):
        pf.Config.load(path)


def test_load_file_with_bad_value(tmp_path):
    data = pf.Config(**TINY).to_dict()
    data["dropout"] = 1.0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="dropout"):
        pf.Config.load(path)


# ------------------------------------------------------- forward-time errors
@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder_decoder"])
def test_token_ids_out_of_range(arch):
    cfg = pf.Config(**TINY, arch=arch, decoder_start_token_id=0 if arch == "encoder_decoder" else None)
    model = pf.Transformer(cfg)
    good = torch.randint(0, 32, (2, 4))
    for bad_value in (32, 40, -1):
        bad = good.clone()
        bad[1, 2] = bad_value
        with pytest.raises(ValueError) as info:
            model(bad, labels=good)
        message = str(info.value)
        assert str(bad_value) in message and "32" in message and "vocab_size" in message
    if arch == "encoder_decoder":
        bad = good.clone()
        bad[0, 0] = 99
        with pytest.raises(ValueError, match="99"):
            model(good, decoder_input_ids=bad)


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder_decoder"])
def test_sequence_longer_than_learned_table(arch):
    cfg = pf.Config(
        **{**TINY, "max_positions": 8},
        arch=arch,
        position="learned",
        decoder_start_token_id=0 if arch == "encoder_decoder" else None,
    )
    model = pf.Transformer(cfg).eval()
    with torch.no_grad():
        ok = torch.randint(0, 32, (2, 8))
        model(ok, labels=ok)  # exactly max_positions is fine
        long = torch.randint(0, 32, (2, 9))
        with pytest.raises(ValueError) as info:
            model(long, labels=long)
    assert "max_positions" in str(info.value)
    assert "8" in str(info.value)


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder_decoder"])
def test_attention_mask_wrong_shape(arch):
    cfg = pf.Config(**TINY, arch=arch, decoder_start_token_id=0 if arch == "encoder_decoder" else None)
    model = pf.Transformer(cfg)
    ids = torch.randint(0, 32, (2, 4))
    for shape in ((2, 5), (1, 4), (2, 4, 1)):
        with pytest.raises(ValueError) as info:
            model(ids, attention_mask=torch.ones(shape, dtype=torch.long), labels=ids)
        message = str(info.value)
        assert "attention_mask" in message
        assert str(shape) in message, message
        assert "(2, 4)" in message, message
