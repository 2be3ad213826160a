"""The docs' measured tables are what the current code produces: each checked block of docs/ is re-run with the
command it records and must equal the page, so a change that moves a documented number fails here until the
docs are regenerated (`posformer report RUN --into PAGE --block NAME`, the command in the block's first line)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from posformer.cli import main
from posformer.cli.report import report_text
from posformer.experiments.doc_blocks import read_block

DOCS = Path(__file__).resolve().parents[1] / "docs"
CHECKED = [("tasks.md", "tasks-quick-check"), ("extrapolation.md", "lm-quick-check")]  # the quick presets' smallest


def _made_by(block: str) -> list[str]:
    """The `posformer ...` commands the block says made its runs."""
    return re.findall(r"^- `(posformer [^`]+)` at commit ", block, flags=re.MULTILINE)


def _tables(text: str) -> str:
    """The generated text after its 'Made by' list."""
    return text.split("\n\n", 2)[2].rstrip()


@pytest.mark.parametrize(("page", "name"), CHECKED)
def test_a_documented_quick_run_is_what_the_code_produces_now(tmp_path, page, name) -> None:
    block = read_block(DOCS / page, name)
    (command,) = _made_by(block)
    argv = shlex.split(command)[1:]
    argv[argv.index("--output-dir") + 1] = str(tmp_path / "run")
    assert main(argv) == 0
    assert _tables(report_text([str(tmp_path / "run")], for_page=True)) == _tables(block), (
        f"docs/{page} block {name} no longer matches the code: regenerate it (see its first line)"
    )
