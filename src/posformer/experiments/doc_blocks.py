"""Generated blocks in a hand-written markdown page: the text between two marker lines belongs to a generator,
everything else to the author.

    <!-- report NAME: the command that regenerates it -->
    ...generated text...
    <!-- /report NAME -->

`replace_block` rewrites one block (atomically, the rest of the page kept byte for byte); `read_block` returns
its text, as a test that compares a fresh run with the page needs; `generated_blocks` finds every block of a page.
"""

from __future__ import annotations

import re
from pathlib import Path

from posformer.utils.file_limits import DATA
from posformer.utils.safe_write import write_text_atomic
from posformer.utils.user_files import read_text_file

NAME_PATTERN = r"[A-Za-z0-9_.-]+"


def _pattern(name: str) -> re.Pattern:
    """Block `name` (a regular expression of names: any block for NAME_PATTERN); group 2 is its generated text."""
    return re.compile(
        rf"^<!-- report ({name})(?::[^\n]*)? -->\n(.*?)^<!-- /report \1 -->$",
        re.MULTILINE | re.DOTALL,
    )


def generated_blocks(page: str) -> list[re.Match]:
    """Every generated block of the page's text, in order (`match.group(2)`: its text)."""
    return list(_pattern(NAME_PATTERN).finditer(page))


def _check_name(name: str) -> None:
    if not re.fullmatch(NAME_PATTERN, name):
        raise ValueError(f"--block {name!r}: expected letters, digits, '.', '_' or '-'")


def _find(path: Path, name: str) -> tuple[str, re.Match]:
    _check_name(name)
    if not path.is_file():
        raise FileNotFoundError(f"--into {path}: no such file")
    page = read_text_file(path, "--into", limit=DATA)
    found = list(_pattern(re.escape(name)).finditer(page))
    if len(found) != 1:
        problem = "has no" if not found else f"has {len(found)}"
        raise ValueError(
            f"--into {path} {problem} block {name!r}: expected one pair of lines '<!-- report {name} -->' and "
            f"'<!-- /report {name} -->' where the generated text goes"
        )
    return page, found[0]


def read_block(path: str | Path, name: str) -> str:
    """The generated text of block `name` in the page at `path`."""
    return _find(Path(path), name)[1].group(2)


def replace_block(path: str | Path, name: str, text: str, command: str) -> None:
    """Put `text` into block `name` of the page at `path`, its opening marker naming `command`."""
    path = Path(path)
    page, found = _find(path, name)
    if "-->" in command:
        raise ValueError(f"--block {name}: the command {command!r} cannot go inside an HTML comment")
    block = f"<!-- report {name}: {command} -->\n{text.rstrip()}\n<!-- /report {name} -->"
    write_text_atomic(path, page[: found.start()] + block + page[found.end() :])
