"""The markdown tables of every experiment's results.md: one header row, an alignment row, the body."""

from __future__ import annotations


def markdown_table(header: list[str], body: list[list[str]], align: str | None = None) -> str:
    """A markdown table; `align` one letter a column, "l" (left) or "r" (right), default: the first column left,
    the others right (a label, then numbers)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in align)
    return "\n".join(["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(row) + " |" for row in body])
