"""Fuzzing run settings as the command line gives them: any `--set SECTION.KEY=VALUE` strings are a `ValueError` (or
`FileNotFoundError`) naming the setting, or settings of the right kinds from which the model builds."""

from __future__ import annotations

import dataclasses
import math

from fuzz_profiles import fuzz
from hypothesis import given
from hypothesis import strategies as st

from posformer.experiments.extension.settings import ExtendSettings
from posformer.experiments.extrapolation.settings import ExtrapolationSettings
from posformer.experiments.synthetic.settings import TaskSettings
from posformer.tasks.causal_lm import build_model
from posformer.train.settings import DataSettings, TrainerSettings, load_run_settings
from posformer.utils.user_files import parse_yaml
from posformer.utils.validation import check_field_kinds

KEYS = (
    [f"trainer.{f.name}" for f in dataclasses.fields(TrainerSettings)]
    + [f"data.{f.name}" for f in dataclasses.fields(DataSettings) if f.name not in ("train", "valid")]
    + [
        f"model.{name}"
        for name in (
            "preset",
            "position",
            "d_model",
            "n_heads",
            "n_layers",
            "max_positions",
            "tie_embeddings",
            "dropout",
            "position_params",
            "norm",
            "vocab_size",
        )
    ]
    + ["data.train", "data.valid", "trainer", "model", "nope.key", "trainer.", ".lr", "trainer.lr.x"]
)
VALUES = [
    "0",
    "1",
    "-1",
    "2",
    "0.5",
    "1e-3",
    "1e3",
    ".nan",
    ".inf",
    "-.inf",
    "nan",
    "true",
    "false",
    "yes",
    "null",
    "''",
    "x",
    "[",
    "]",
    "{",
    "[]",
    "{}",
    "[1, 2]",
    "[0.9, 0.95]",
    "{a: 1}",
    "{base: .nan}",
    "!!python/none ''",
    "llama",
    "rope",
    "cosine",
    "1" * 30,
    "\x00",
    "'a: b'",
    "- 1",
    ": :",
    "&a [*a]",
]


@st.composite
def overrides(draw) -> list[str]:
    items = draw(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), min_size=1, max_size=4))
    small = ["model.d_model=32", "model.n_layers=1"][: draw(st.integers(0, 2))]
    return [f"{key}={value}" for key, value in items] + small


@fuzz(250)
@given(overrides())
def test_any_set_override_is_refused_by_name_or_builds(items: list[str]) -> None:
    try:
        settings = load_run_settings(None, items)
        model = build_model(settings.model, 65, settings.data.seq_len)
    except (ValueError, FileNotFoundError) as err:
        message = str(err)
        assert any(word in message for word in ("--set", "trainer", "data", "model", "Config", "preset", "mapping")), (
            message
        )
        return
    check_field_kinds(settings.trainer, "trainer.")
    check_field_kinds(settings.data, "data.")
    assert all(math.isfinite(v) for v in (settings.trainer.lr, settings.trainer.weight_decay))
    assert model.cfg.vocab_size == 65 and model.cfg.max_positions >= settings.data.seq_len


EXPERIMENTS = {"extrapolate": ExtrapolationSettings, "extrapolate --task": TaskSettings, "extend": ExtendSettings}


@st.composite
def experiment_overrides(draw):
    label = draw(st.sampled_from(sorted(EXPERIMENTS)))
    cls = EXPERIMENTS[label]
    names = draw(
        st.lists(
            st.sampled_from([f.name for f in dataclasses.fields(cls)] + ["nope", "name"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    return label, {name: as_set_value(draw(st.sampled_from(VALUES))) for name in names}


def as_set_value(text: str):
    """What `--set KNOB=text` hands the settings: the YAML value (text that is not YAML stops at the parser)."""
    try:
        return parse_yaml(text)
    except ValueError:
        return text


@fuzz(250)
@given(experiment_overrides())
def test_any_experiment_setting_is_refused_by_name_or_valid(call) -> None:
    """The three experiments' settings from their `quick` preset with any knobs overridden, as `--set` gives them."""
    label, overrides = call
    cls = EXPERIMENTS[label]
    try:
        settings = cls.preset("quick", **overrides)
        if cls is ExtendSettings:
            settings = settings.resolve(16)
    except ValueError as err:
        assert any(name in str(err) for name in (*overrides, label)), str(err)
        return
    check_field_kinds(settings, "")
