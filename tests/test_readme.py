"""README.md still runs as written: its `posformer` commands parse with the real command-line parser (none is
run), every `make` target it names exists, its Python example runs, its relative links lead to files, every
registered position encoding is in its table, and it stays a front door (at most 220 lines)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import posformer as pf
from posformer.cli import bench, program

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 220


def readme() -> str:
    return README.read_text(encoding="utf-8")


def code_blocks(language: str) -> list[str]:
    """The contents of the README's ```language blocks, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", readme(), flags=re.M | re.S)


def shell_lines() -> list[str]:
    """Every command line of the README's ```bash blocks, a line ending in a backslash joined to the next."""
    lines = []
    for block in code_blocks("bash"):
        lines.extend(re.sub(r"\\\n\s*", " ", block).splitlines())
    return [line.strip() for line in lines if line.strip()]


def posformer_lines() -> list[str]:
    return [line for line in shell_lines() if line.startswith("posformer ")]


STANDALONE_PARSER = bench.standalone_parser


def parse_only(command, prog):
    """`bench.standalone_parser`, but the parsed benchmark runs nothing."""
    parser = STANDALONE_PARSER(command, prog)
    parser.set_defaults(run=lambda options: 0)
    return parser


def test_the_readme_names_posformer_commands():
    assert len(posformer_lines()) >= 5, "the README's ```bash blocks should show the `posformer` commands"


@pytest.mark.parametrize("line", posformer_lines())
def test_every_posformer_command_in_the_readme_parses(line, monkeypatch, capsys):
    argv = shlex.split(line, comments=True)[1:]
    try:
        args = program.parse(argv)
        if hasattr(args, "rest"):  # a command that parses its own arguments: `bench` picks a benchmark's parser
            assert args.command == "bench", f"README line {line!r}: no parse-only check for {args.command!r}"
            monkeypatch.setattr(bench, "standalone_parser", parse_only)
            bench.cmd_bench(args)
    except SystemExit as exit_:
        pytest.fail(f"README line {line!r} does not parse (exit {exit_.code}): {capsys.readouterr().err.strip()}")


def makefile_targets() -> set[str]:
    targets = set()
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.$()/ -]+):(?!=)", line)
        if match:
            targets.update(match.group(1).split())
    return targets


def make_targets_named() -> set[str]:
    """The targets of `make X` in the README's inline code and of its shell lines that start with `make `."""
    named = set(re.findall(r"`make ([A-Za-z0-9_-]+)", readme()))
    for line in shell_lines():
        if line.startswith("make "):
            named.update(t for t in shlex.split(line, comments=True)[1:] if not t.startswith("-") and "=" not in t)
    return named


def test_every_make_target_the_readme_names_exists():
    named = make_targets_named()
    assert {"demo", "test"} <= named, "the README should give `make demo` and `make test`"
    missing = sorted(named - makefile_targets())
    assert not missing, f"README names make targets the Makefile lacks: {missing}"


def test_the_python_example_runs_as_written(tmp_path):
    blocks = code_blocks("python")
    assert blocks, "the README should have a ```python example"
    script = tmp_path / "readme_example.py"
    script.write_text("\n".join(blocks), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"the README's Python example failed:\n{result.stderr[-4000:]}"


def test_every_relative_link_in_the_readme_leads_to_a_file():
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the README itself
        path = target.split("#", 1)[0]
        if not (ROOT / path).exists():
            broken.append(target)
    assert not broken, f"README links to files that do not exist: {broken}"


def test_every_registered_position_encoding_is_in_the_readme_table():
    rows = set(re.findall(r"^\| `([a-z0-9_]+)` \|", readme(), flags=re.M))
    missing = sorted(set(pf.positions.names()) - rows)
    assert not missing, f"README's table of position encodings lacks: {missing}"


def test_the_readme_is_a_front_door():
    lines = len(readme().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines; keep it at most {MAX_LINES} and move detail to docs/"
