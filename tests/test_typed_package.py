"""A user's own type checker sees posformer's types: the package ships `py.typed`, so mypy reads it from where it is
installed, and the public names (`pf.Config`, `pf.Transformer(cfg)(ids)`, `pf.load`, ...) carry their annotations,
not `Any`. Each snippet is checked by mypy --strict (the settings of `[tool.mypy]`, so that `make typecheck`'s cache
serves it) from a folder outside the repository, where posformer is found only as an installed package."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[1]

USES_THE_API = """\
import torch

import posformer as pf
from posformer import Config, Transformer

cfg: Config = pf.Config(arch="decoder", vocab_size=64, d_model=32, n_layers=1, n_heads=2, position="rope")
model: Transformer = pf.Transformer(cfg)
out: pf.ModelOutput = model(torch.zeros(1, 4, dtype=torch.long))
logits: torch.Tensor | None = out.logits
cache: pf.Cache = model.new_cache()
loaded: pf.Transformer = pf.load("runs/x", dtype="bfloat16")
imported: pf.Transformer = pf.from_hf("dir", head="span_qa")
written = pf.to_hf(model, "out")
encodings: list[str] = pf.positions.names()
slopes: torch.Tensor = pf.positions.alibi_slopes(4)
inv_freq, factor = pf.positions.rope_inv_freq(64, 10000.0, {"type": "linear", "factor": 2.0})
scale: float = factor
"""

# each line ending in "# error" is one that mypy must report
MISUSES_THE_API = """\
import torch

import posformer as pf

cfg = pf.Config(d_model="wide")  # error
model = pf.Transformer(cfg)
text: str = model(torch.zeros(1, 4, dtype=torch.long)).logits  # error
pf.load(3)  # error
count: int = pf.positions.names()  # error
model.generate(torch.zeros(1, 1, dtype=torch.long), max_new_tokens="many")  # error
"""


def mypy_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> tuple[list[int], str]:
    """The lines of `source` that mypy --strict reports an error on, and its whole report."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(source)
    monkeypatch.chdir(tmp_path)
    config, cache = str(ROOT / "pyproject.toml"), str(ROOT / ".mypy_cache")
    report, errors, _ = mypy_api.run(["--config-file", config, "--cache-dir", cache, str(snippet)])
    lines = [int(line.split(":")[1]) for line in report.splitlines() if line.startswith(f"{snippet.name}:")]
    return sorted(set(lines)), report + errors


def test_a_user_checker_accepts_typed_use_of_the_public_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines, report = mypy_errors(tmp_path, monkeypatch, USES_THE_API)
    assert lines == [], report
    assert "Success: no issues found in 1 source file" in report, report


def test_a_user_checker_reports_each_misuse_of_the_public_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = [i for i, line in enumerate(MISUSES_THE_API.splitlines(), 1) if line.endswith("# error")]
    lines, report = mypy_errors(tmp_path, monkeypatch, MISUSES_THE_API)
    assert lines == expected, report
