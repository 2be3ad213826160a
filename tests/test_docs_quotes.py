"""The research pages quote their numbers: every value with an interval ("2.49 [2.31, 2.68]") that the hand-written
text of docs/research.md, the README or an experiment page states must appear, character for character, in a
block that `posformer report` generated from recorded runs (or in a run's output recorded in docs/results/), so a
summary cannot keep a number that the regenerated tables no longer hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posformer.experiments.doc_blocks import generated_blocks

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [DOCS / "research.md", ROOT / "README.md", DOCS / "extrapolation.md", DOCS / "extension.md", DOCS / "tasks.md"]
WITH_INTERVAL = re.compile(r"[-+]?\d+\.\d+ \[[-+]?\d+\.\d+, [-+]?\d+\.\d+\]")


def _read(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def quotable_text() -> str:
    """The text of every generated block of docs/ and of every recorded output in docs/results/."""
    blocks = [m.group(2) for page in sorted(DOCS.glob("*.md")) for m in generated_blocks(_read(page))]
    return "\n".join(blocks + [_read(page) for page in sorted((DOCS / "results").glob("*.md"))])


def test_the_pattern_finds_the_quoted_values() -> None:
    """The check below is not empty: research.md's tables quote values in the pattern's form."""
    assert len(WITH_INTERVAL.findall(_read(DOCS / "research.md"))) >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_value_with_an_interval_is_quoted_from_a_generated_block(page: Path) -> None:
    quotable = quotable_text()
    text = _read(page)
    for block in reversed(generated_blocks(text)):  # blanked, keeping the line numbers
        text = text[: block.start()] + "\n" * block.group(0).count("\n") + text[block.end() :]
    missing = [
        f"{page.name}:{number}: {value}"
        for number, line in enumerate(text.split("\n"), 1)
        for value in WITH_INTERVAL.findall(line)
        if value not in quotable
    ]
    assert not missing, "not in any generated block (regenerate the blocks, then quote them):\n" + "\n".join(missing)
