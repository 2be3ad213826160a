"""`posformer.train.precision`: "auto" resolves to what the device has, and a run records what it used."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from posformer.tasks.causal_lm import train_causal_lm
from posformer.train import precision
from posformer.train.settings import RunSettings
from train_helpers import tiny_run, write_corpus


def test_auto_is_bf16_exactly_where_the_cpu_lists_bf16_instructions(monkeypatch):
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").is_file() else set()
    listed = bool(flags & set(precision.CPU_BF16_FLAGS))
    assert precision.resolve_precision("auto", "cpu") == ("bf16" if precision.cpu_has_bf16() else "fp32")
    if Path("/proc/cpuinfo").is_file():
        assert precision.cpu_has_bf16() == (listed or torch.cpu._is_avx512_bf16_supported())


def test_auto_falls_back_to_fp32_without_bf16_units(monkeypatch):
    monkeypatch.setattr(precision, "has_bf16_units", lambda device: False)
    assert precision.resolve_precision("auto", "cpu") == "fp32"
    monkeypatch.setattr(precision, "has_bf16_units", lambda device: True)
    assert precision.resolve_precision("auto", "cpu") == "bf16"


@pytest.mark.parametrize("given", ["fp32", "bf16", "fp16"])
def test_an_explicit_precision_is_kept(given):
    assert precision.resolve_precision(given, "cpu") == given


def test_an_unknown_precision_is_named():
    with pytest.raises(ValueError, match="precision='half' is invalid: expected one of auto, fp32, bf16, fp16"):
        precision.resolve_precision("half", "cpu")
    with pytest.raises(ValueError, match="precision='auto' is not resolved"):
        precision.autocast("auto", "cpu")


def test_a_run_with_auto_records_the_precision_it_used(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(precision, "has_bf16_units", lambda device: True)
    config = tiny_run(write_corpus(tmp_path / "text.txt"), 2, dropout=0.0, precision="auto")
    train_causal_lm(RunSettings.from_dict(config), str(tmp_path / "run"), log=lambda line: None, progress=False)
    recorded = yaml.safe_load((tmp_path / "run" / "run_config.yaml").read_text())
    assert recorded["trainer"]["precision"] == "bf16"
