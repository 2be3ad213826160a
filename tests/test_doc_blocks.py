"""Generated blocks of a markdown page (`experiments.doc_blocks`): one block rewritten, the author's text kept."""

from __future__ import annotations

import pytest

from posformer.experiments.doc_blocks import read_block, replace_block

PAGE = (
    "# Title\n\nBy hand.\n\n<!-- report a -->\nold table\n<!-- /report a -->\n\n"
    "More by hand.\n<!-- report b: x -->\nb\n<!-- /report b -->\n"
)


def test_a_block_is_replaced_and_the_rest_of_the_page_kept(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    replace_block(page, "a", "| new | table |\n", "posformer report runs/a --into page.md --block a")
    text = page.read_text()
    assert text == PAGE.replace(
        "<!-- report a -->\nold table\n",
        "<!-- report a: posformer report runs/a --into page.md --block a -->\n| new | table |\n",
    )
    assert read_block(page, "a") == "| new | table |\n" and read_block(page, "b") == "b\n"
    replace_block(page, "a", "again", "cmd")
    assert read_block(page, "a") == "again\n" and text.count("More by hand.") == 1


@pytest.mark.parametrize(
    ("page", "name", "why"),
    [
        (PAGE, "c", "has no block 'c'"),
        (PAGE + "<!-- report a -->\nx\n<!-- /report a -->\n", "a", "has 2 block"),
        (PAGE, "a b", "expected letters"),
    ],
)
def test_a_missing_doubled_or_misnamed_block_is_refused_by_name(tmp_path, page, name, why) -> None:
    path = tmp_path / "page.md"
    path.write_text(page)
    with pytest.raises(ValueError, match=why):
        replace_block(path, name, "t", "cmd")
    assert path.read_text() == page


def test_a_missing_page_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_block(tmp_path / "absent.md", "a")
