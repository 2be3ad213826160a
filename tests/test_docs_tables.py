"""The docs' measured tables are what the current code produces: each checked block of docs/ is re-run with the
commands it records and must equal the page, so a change that moves a documented number fails here until the
docs are regenerated (`make docs-tables`, or the command in each block's first line)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from posformer.cli import main
from posformer.cli.report import report_text
from posformer.experiments.doc_blocks import read_block

DOCS = Path(__file__).resolve().parents[1] / "docs"
RUNS = "runs/docs/"  # where the checked blocks' runs are recorded; re-run under a temporary directory instead
CHECKED = {  # the quick presets' smallest cases: block -> page
    "tasks-quick-check": "tasks.md",
    "lm-quick-check": "extrapolation.md",
    "extend-quick-check": "extension.md",
}
SOURCE = {"extend-quick-check": "lm-quick-check"}  # a block whose run reads the model another block's run trained


def _made_by(block: str) -> list[str]:
    """The `posformer ...` commands the block says made its runs."""
    return re.findall(r"^- `(posformer [^`]+)` at commit ", block, flags=re.MULTILINE)


def _tables(text: str) -> str:
    """The generated text after its 'Made by' list."""
    return text.split("\n\n", 2)[2].rstrip()


def _rerun(name: str, root: Path) -> tuple[str, Path]:
    """Run block `name`'s recorded command with its runs under `root`; (the block, the run's output directory)."""
    block = read_block(DOCS / CHECKED[name], name)
    (command,) = _made_by(block)
    argv = [arg.replace(RUNS, f"{root}/") for arg in shlex.split(command)[1:]]
    assert main(argv) == 0
    return block, Path(argv[argv.index("--output-dir") + 1])


@pytest.mark.parametrize("name", CHECKED)
def test_a_documented_quick_run_is_what_the_code_produces_now(tmp_path, name) -> None:
    if name in SOURCE:
        _rerun(SOURCE[name], tmp_path)
    block, run = _rerun(name, tmp_path)
    assert _tables(report_text([str(run)], for_page=True)) == _tables(block), (
        f"docs/{CHECKED[name]} block {name} no longer matches the code: regenerate it (see its first line)"
    )
