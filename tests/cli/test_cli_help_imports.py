"""`posformer --help` and every command's `--help` build their parsers without importing torch (or transformers,
numpy, matplotlib): the options are declared in modules without them, and the model code is imported when a
command runs. Each line runs in a fresh interpreter, which reports what it imported: a property of the import
graph, whatever the machine's load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import posformer
from posformer.cli.bench import BENCHMARKS
from posformer.cli.program import COMMANDS

HEAVY = ("torch", "transformers", "numpy", "matplotlib")
CHILD = """
import json, sys
from posformer.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
print(json.dumps({"code": code, "heavy": [name for name in %r if name in sys.modules]}), file=sys.stderr)
""" % (HEAVY,)


def _help_lines() -> list[list[str]]:
    lines = [[]]
    for command in COMMANDS:
        lines.append([command.name])
        lines += [[command.name, sub.name] for sub in command.subcommands]
    return lines + [["bench", flag] for flag in BENCHMARKS]


def _child(code: str, *argv: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", _help_lines(), ids=lambda argv: " ".join(argv) or "posformer")
def test_help_imports_no_torch(argv: list[str]) -> None:
    report = _child(CHILD, *argv, "--help")
    assert report == {"code": 0, "heavy": []}


def test_import_posformer_imports_no_torch_until_a_public_name_is_used() -> None:
    code = f"""
import json, sys
import posformer
before = [name for name in {HEAVY!r} if name in sys.modules]
posformer.Config
print(json.dumps({{"before": before, "after": "torch" in sys.modules}}), file=sys.stderr)
"""
    assert _child(code) == {"before": [], "after": True}


def test_every_public_name_is_its_module_s_object() -> None:
    import importlib

    for name, (module, attribute) in posformer.PUBLIC.items():
        found = importlib.import_module(module)
        assert getattr(posformer, name) is (found if attribute is None else getattr(found, attribute)), name
    assert sorted(posformer.__all__) == sorted([*posformer.PUBLIC, "__version__"])
    assert posformer.train is importlib.import_module("posformer.train")  # a submodule, as an eager import left it
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        posformer.no_such_name


def test_the_task_names_the_help_offers_are_the_suite_s() -> None:
    from posformer.experiments.longeval.task_names import TASK_NAMES
    from posformer.experiments.longeval.tasks import TASKS

    assert tuple(TASKS) == TASK_NAMES


def test_a_choice_declared_beside_torch_code_is_refused_before_any_work(tmp_path, capsys) -> None:
    """`--cross-attention-init`'s choices live with the BERT2BERT warm start (which imports torch), so the flag is
    checked with the job's options, not while parsing: still before anything is read or written."""
    from posformer.cli import main

    run = tmp_path / "run"
    assert main(["qa", "train", "--cross-attention-init", "copy", "--output-dir", str(run)]) == 2
    assert "--cross-attention-init='copy' is invalid: expected one of random, self_attention" in capsys.readouterr().err
    assert not run.exists()
