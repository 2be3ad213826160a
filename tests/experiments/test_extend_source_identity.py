"""`posformer extend` extends what its record says: a resume refuses a source replaced since the record was made,
and over seeds every seed's source must come from the same recipe (`extension.source_identity`)."""

from __future__ import annotations

import json
import shutil

from test_extend_cli import EXTEND, ROW

from posformer.cli import main
from posformer.experiments.extension.source_identity import weights_digest
from posformer.loading import load_model

METHODS = ["--methods", "none", "--steps", "0"]


def test_a_resume_refuses_a_source_replaced_since_the_record(tmp_path, capsys) -> None:
    for seed in ("0", "1"):
        assert main(["extrapolate", *ROW, "--seed", seed, "--output-dir", str(tmp_path / f"lm-{seed}")]) == 0
    source = tmp_path / "lm" / "rows" / "rope"
    shutil.copytree(tmp_path / "lm-0", tmp_path / "lm")
    out = tmp_path / "ext"
    assert main(["extend", str(source), *EXTEND, *METHODS, "--output-dir", str(out)]) == 0
    recorded = json.loads((out / "results.json").read_text())["source"]
    assert recorded["weights_sha256"] == weights_digest(load_model(source))
    assert (
        recorded["trained_with"]["extrapolate"]["steps"] == 3 and "seed" not in recorded["trained_with"]["extrapolate"]
    )
    assert main(["extend", str(source), *EXTEND, *METHODS, "--output-dir", str(out)]) == 0  # the same source resumes
    shutil.rmtree(tmp_path / "lm")
    shutil.copytree(tmp_path / "lm-1", tmp_path / "lm")  # the same path, another model
    assert main(["extend", str(source), *EXTEND, *METHODS, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "re-trained or replaced" in err


def test_seeds_refuse_sources_trained_with_another_recipe(tmp_path, capsys) -> None:
    for seed, steps in (("0", "3"), ("1", "4")):
        args = [*ROW, "--steps", steps, "--seeds", f"{seed},", "--output-dir", str(tmp_path / f"lm-{seed}")]
        assert main(["extrapolate", *args]) == 0
    runs = str(tmp_path / "lm-{seed}" / "seed-{seed}" / "rows" / "rope")
    out = tmp_path / "ext"
    assert main(["extend", runs, *EXTEND, *METHODS, "--seeds", "2", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the source of seed 1" in err and "extrapolate.steps: 3 against 4" in err
    assert list(json.loads((out / "results.json").read_text())["per_seed"]) == ["0"]  # seed 0 kept, seed 1 not run
