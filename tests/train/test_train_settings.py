"""Run settings: every bad value is refused before any work, with the field, the value and what was expected."""

from __future__ import annotations

import math

import pytest

from posformer.train.settings import DataSettings, RunSettings, TrainerSettings, load_run_settings

BAD_TRAINER = {  # field -> (value, the error's words)
    "steps": (0, "trainer.steps=0 is invalid: expected a positive integer"),
    "batch_size": (True, "trainer.batch_size=True is invalid: expected a positive integer"),
    "warmup": (-1, "trainer.warmup=-1 is invalid: expected an integer >= 0"),
    "seed": (1.5, "trainer.seed=1.5 is invalid: expected an integer >= 0"),
    "save_every": (0, "trainer.save_every=0 is invalid: expected a positive integer, or null for eval_every"),
    "lr": (math.inf, "trainer.lr=inf is invalid: expected a number > 0"),
    "min_lr_ratio": (1.5, "trainer.min_lr_ratio=1.5 is invalid: expected a number in [0, 1]"),
    "weight_decay": ("0.1", "trainer.weight_decay='0.1' is invalid: expected a number >= 0"),
    "betas": (0.9, "trainer.betas=0.9 is invalid: expected two numbers in [0, 1)"),
    "clip_grad": (0, "trainer.clip_grad=0 is invalid: expected a number > 0, or null for no clipping"),
    "max_minutes": (math.nan, "trainer.max_minutes=nan is invalid: expected a number > 0, or null"),
    "compile": ("yes", "trainer.compile='yes' is invalid: expected true or false"),
    "schedule": ("cosin", "trainer.schedule='cosin' is invalid: expected one of constant, linear, cosine"),
}


@pytest.mark.parametrize("name", list(BAD_TRAINER))
def test_bad_trainer_setting_names_the_field(name: str) -> None:
    value, message = BAD_TRAINER[name]
    with pytest.raises(ValueError) as err:
        TrainerSettings(**{name: value}).validate()
    assert str(err.value) == message


def test_bad_data_settings_name_the_field(tmp_path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("some text")
    with pytest.raises(ValueError, match=r"^data.seq_len=1 is invalid: expected an integer >= 2$"):
        DataSettings(train=[str(corpus)], seq_len=1).validate()
    with pytest.raises(ValueError, match=r"^data.valid_fraction=1 is invalid: expected a number in \(0, 1\) when"):
        DataSettings(train=[str(corpus)], valid_fraction=1).validate()
    with pytest.raises(ValueError, match=r"^model=\[1\] is invalid: expected a mapping"):
        RunSettings(model=[1]).validate()


def test_overrides_are_read_as_yaml_1_2_and_validated() -> None:
    """1e-3 is a number in YAML 1.2 (a string to PyYAML's YAML 1.1 resolver); betas become a tuple."""
    settings = load_run_settings(None, ["trainer.lr=1e-3", "trainer.betas=[0.9, 0.99]"])
    assert settings.trainer.lr == 1e-3 and settings.trainer.betas == (0.9, 0.99)
