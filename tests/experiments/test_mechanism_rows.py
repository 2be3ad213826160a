"""Mechanism rows of `posformer extrapolate` (`experiments.mechanism_rows`): iRoPE, gated attention and a gated
DeltaNet hybrid beside the encodings, each its base encoding's row changed by the mechanism only."""

from __future__ import annotations

import json

from posformer.cli import main
from posformer.experiments.extrapolation.experiment import initial_model
from posformer.experiments.extrapolation.settings import ExtrapolationSettings
from posformer.experiments.mechanism_rows import MECHANISM_ROWS


def _settings() -> ExtrapolationSettings:
    return ExtrapolationSettings.preset("quick", d_model=32, layers=4, heads=2, vocab_size=300, train_len=32)


def test_each_mechanism_row_is_its_base_row_changed_by_the_mechanism_only():
    s = _settings()
    for row, mechanism in MECHANISM_ROWS.items():
        ours, base = initial_model(s, row, 300).cfg, initial_model(s, mechanism.base, 300).cfg
        changed = {k for k, v in ours.to_dict().items() if base.to_dict()[k] != v}
        expected = {
            "irope": {"layer_types", "layer_settings"},
            "gated_rope": {"attention_output_gate"},
            "deltanet_nope": {"layer_types", "layer_settings", "gated_deltanet"},
        }[row]
        assert changed <= expected and changed & expected, (row, changed)


def test_irope_chunks_its_rope_layers_at_a_quarter_of_l_and_leaves_every_fourth_layer_without_positions():
    cfg = initial_model(_settings(), "irope", 300).cfg
    layers = cfg.layer_configs(4)
    assert [c.position for c in layers] == ["rope", "rope", "rope", "none"]
    assert [c.attention_chunk for c in layers] == [8, 8, 8, None]
    assert layers[3].query_temperature == {"scale": 0.1, "floor_size": 8}


def test_deltanet_nope_has_three_deltanet_layers_to_one_nope_attention_layer():
    layers = initial_model(_settings(), "deltanet_nope", 300).cfg.layer_configs(4)
    assert [c.mixer for c in layers] == ["gated_deltanet"] * 3 + ["attention"]
    assert layers[3].position == "none"


def test_extrapolate_trains_and_evaluates_mechanism_rows(tmp_path):
    out = tmp_path / "run"
    args = ["--preset", "quick", "--positions", "none,irope,gated_rope,deltanet_nope", "--train-len", "16"]
    args += ["--eval-lens", "16,32", "--steps", "2", "--d-model", "32", "--layers", "4", "--heads", "2"]
    args += ["--vocab-size", "300", "--eval-tokens", "128", "--tokenizer-chars", "20000", "--no-progress"]
    args += ["--set", "train_chars=40000", "--set", "batch_size=2", "--output-dir", str(out)]
    assert main(["extrapolate", *args]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert set(rows) == {"none", "irope", "gated_rope", "deltanet_nope"}
    for row in ("irope", "gated_rope", "deltanet_nope"):
        assert rows[row]["error"] is None and all(
            v is not None for stream in rows[row]["ppl"].values() for v in stream.values()
        ), row
