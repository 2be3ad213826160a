"""Text that Python holds but that is no Unicode text: a lone surrogate (a code point in U+D800..U+DFFF).

A JSON `"\\ud800"` escape, a YAML `"\\ud800"`, or bytes on the command line that are not UTF-8 (Python keeps them
as lone surrogates) give a `str` that no UTF-8 writer and no tokenizer (Hugging Face's is Rust, UTF-8 only) takes:
they fail deep inside with a bare `TypeError`. Each way text comes in refuses it where it comes in, by name:

    check_text("--question 1", question)          # ValueError: --question 1 holds a lone surrogate (\\udcff) ...
    check_texts(value, "QA data file dev.json")   # the same for the first string (or key) of a parsed value
"""

from __future__ import annotations

import re
from typing import Any

SURROGATE = re.compile("[\ud800-\udfff]")
ESCAPE_OR_SURROGATE = re.compile(r"\\[uU]|[\ud800-\udfff]")  # what JSON or YAML text holding one must contain


def surrogate_in(text: str) -> str | None:
    """The first lone surrogate of `text`, written as an escape (`\\ud800`); None when there is none."""
    found = None if text.isascii() else SURROGATE.search(text)
    return None if found is None else f"\\u{ord(found.group()):04x}"


def _refusal(name: str, code: str) -> ValueError:
    return ValueError(
        f"{name} holds a lone surrogate ({code}): expected Unicode text (such an escape is only valid as half of "
        "a surrogate pair)"
    )


def check_text(name: str, text: str) -> None:
    """Raise `ValueError` naming `name` when the string `text` holds a lone surrogate."""
    code = surrogate_in(text)
    if code is not None:
        raise _refusal(name, code)


def check_texts(value: Any, where: str, source: str | None = None) -> None:
    """Raise `ValueError` naming `where` and the place (`data[0].paragraphs[1].context`) of the first string or key
    of the parsed JSON/YAML `value` that holds a lone surrogate. `source`: the text `value` was parsed from; when it
    holds neither an escape nor a surrogate, there is nothing to look for."""
    if (source is not None and ESCAPE_OR_SURROGATE.search(source) is None) or not _holds_surrogate(value):
        return
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            code = surrogate_in(item)
            if code is not None:
                raise _refusal(f"{where}: {at or 'the value'}", code)
        elif isinstance(item, dict):
            for key in item:
                code = surrogate_in(key) if isinstance(key, str) else None
                if code is not None:
                    raise _refusal(f"{where}: a key of {at or 'the top-level mapping'}", code)
            stack.extend((child, _step(at, key)) for key, child in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((child, f"{at}[{i}]") for i, child in reversed(list(enumerate(item))))


def _holds_surrogate(value: Any) -> bool:
    """Whether a string or key of the parsed `value` holds a lone surrogate (the quick look, without places)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if surrogate_in(item) is not None:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _step(at: str, key: Any) -> str:
    """The place of `key` under the place `at`: `a.b` for a name, `a['b c']` otherwise."""
    if isinstance(key, str) and key.isidentifier():
        return f"{at}.{key}" if at else key
    return f"{at}[{key!r}]"
