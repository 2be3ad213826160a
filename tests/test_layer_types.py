"""`Config.layer_types` and `layer_settings`: checked with errors that name the field, resolved per label, and
round-tripped as plain data. (The mixed stacks themselves: tests/positions/test_positions_mixed_stacks.py.)"""

import json

import pytest
import torch

import posformer as pf
from posformer.checkpoints.native import load_pretrained, save_pretrained
from tests.positions.test_positions_conformance import config

GEMMA_LIKE = dict(
    position_params={"theta": 1e6},
    layer_types=["local", "local", "full_attention"],
    layer_settings={"local": {"sliding_window": 4, "position_params": {"theta": 1e4}}},
)


def test_each_label_resolves_its_own_settings_over_the_config() -> None:
    cfg = config("rope", "decoder", n_layers=3, **GEMMA_LIKE)
    local, _, global_ = cfg.layer_configs(3)
    assert (local.sliding_window, local.position_params["theta"]) == (4, 1e4)
    assert (global_.sliding_window, global_.position_params["theta"]) == (None, 1e6)
    assert local.layer_types is None and local.d_model == cfg.d_model
    assert cfg.layer_settings["local"]["position_params"]["layout"] == "half"  # resolved: the encoding's defaults


def test_round_trips_through_dict_json_and_yaml(tmp_path) -> None:
    cfg = config("rope", "decoder", n_layers=3, **GEMMA_LIKE)
    assert pf.Config.from_dict(cfg.to_dict()) == cfg
    for suffix in (".json", ".yaml"):
        cfg.save(tmp_path / f"c{suffix}")
        assert pf.Config.load(tmp_path / f"c{suffix}") == cfg


def test_a_saved_model_loads_with_its_layer_encodings(tmp_path) -> None:
    cfg = config(
        "rope",
        "decoder",
        n_layers=3,
        layer_types=["t5", "t5", "full_attention"],
        layer_settings={"t5": {"position": "t5"}},
    )
    model = pf.Transformer(cfg).eval()
    assert "decoder.layer_positions.t5.table.weight" in model.state_dict()
    save_pretrained(model, tmp_path)
    loaded = load_pretrained(tmp_path).eval()
    ids = torch.randint(1, 53, (1, 6))
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=0, rtol=0)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(layer_types=["a"]), r"Config.layer_types=\['a'\] is invalid: expected a list of n_layers=2 labels"),
        (dict(layer_types="ab"), r"expected a list of n_layers=2 labels"),
        (
            dict(layer_settings={"a": {"position": "none"}}),
            r"Config.layer_settings=.* expected \{\} without layer_types",
        ),
        (
            dict(layer_types=["a", "b"], layer_settings={"c": {}}),
            r"Config.layer_settings\['c'\]=\{\} is invalid: expected settings for a label of layer_types \(a, b\)",
        ),
        (
            dict(layer_types=["a", "b"], layer_settings={"a": {"norm": "rmsnorm"}}),
            r"expected a dict of some of position, position_params, sliding_window",
        ),
        (
            dict(layer_types=["a", "b"], layer_settings={"a": {"position_params": {"base": 10}}}),
            r"Config.layer_settings\['a'\]: Config.position_params has unknown key\(s\) \['base'\] for position='rope'",
        ),
        (
            dict(layer_types=["a", "b"], layer_settings={"a": {"sliding_window": 0}}),
            r"Config.layer_settings\['a'\]: Config.sliding_window=0 is invalid",
        ),
        (
            dict(layer_types=["a", "b"], layer_settings={"a": {"position": "learned"}}),
            r"Config.layer_settings\['a'\]\['position'\]='learned' is invalid: expected an encoding of the attention "
            r"layers \(the config's own position, 'rope', embeds the tokens once",
        ),
    ],
)
def test_bad_layer_settings_name_the_field(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config("rope", "decoder", **changes)


def test_an_encoder_decoder_has_no_layer_types() -> None:
    with pytest.raises(ValueError, match=r"Config.layer_types=.* expected None with arch='encoder_decoder'"):
        config("rope", "encoder_decoder", layer_types=["a", "a"])


def test_an_encoder_layer_slides_its_own_window_on_both_sides() -> None:
    """Local and global encoder layers (ModernBERT's): the local one sees keys fewer than 3 slots away."""
    cfg = config("rope", "encoder", layer_types=["a", "full_attention"], layer_settings={"a": {"sliding_window": 3}})
    model = pf.Transformer(cfg).eval()
    assert [block.reach.window for block in model.encoder.layers] == [3, None]
    probs = model(torch.randint(1, cfg.vocab_size, (1, 8)), output_attentions=True).attentions
    i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]
    assert torch.equal(probs[0][0] > 0, ((i - j).abs() < 3).expand_as(probs[0][0]))
    assert bool((probs[1] > 0).all())


def test_the_settings_given_are_not_mutated() -> None:
    settings = {"a": {"position": "alibi"}}
    config("rope", "decoder", layer_types=["a", "full_attention"], layer_settings=settings)
    assert settings == {"a": {"position": "alibi"}}


def test_swapping_the_position_keeps_the_layer_kinds() -> None:
    """Gemma-like local and global layers, the encoding swapped for ALiBi: every layer ALiBi, the local ones
    still windowed (their RoPE base belonged to RoPE and is dropped); a label that names its own encoding
    keeps it."""
    cfg = config("rope", "decoder", n_layers=3, **GEMMA_LIKE).replace(position="alibi")
    assert [(c.position, c.sliding_window) for c in cfg.layer_configs(3)] == [
        ("alibi", 4),
        ("alibi", 4),
        ("alibi", None),
    ]
    nope = config("rope", "decoder", layer_types=["a", "full_attention"], layer_settings={"a": {"position": "none"}})
    assert [c.position for c in nope.replace(position="t5").layer_configs(2)] == ["none", "t5"]


def test_a_label_without_settings_other_than_full_attention_is_refused_naming_the_choices() -> None:
    """A mistyped label ("sliding_attenton") would otherwise keep the config's own settings unnoticed."""
    expected = (
        r"Config.layer_types\[1\]='sliding_attenton' is invalid: expected one of 'sliding_attention', 'full_attention'"
    )
    with pytest.raises(ValueError, match=expected):
        config(
            "rope",
            "decoder",
            layer_types=["sliding_attention", "sliding_attenton"],
            layer_settings={"sliding_attention": {"sliding_window": 4}},
        )


def test_a_checkpoint_config_with_an_unknown_label_is_refused_on_load(tmp_path) -> None:
    model = pf.Transformer(config("rope", "decoder", layer_types=["full_attention", "full_attention"]))
    save_pretrained(model, tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["posformer"]["layer_types"] = ["x", "full_attention"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"Config.layer_types\[0\]='x' is invalid"):
        load_pretrained(tmp_path)
