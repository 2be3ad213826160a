"""The numbers of a figure read back from the markdown tables that `posformer report` wrote (a generated block of a
docs page, or a run's results.md), for a figure whose recorded run is no longer kept.

The tables print what the figures draw: an extrapolation run's perplexity per eval set, row and length (over
seeds, the geometric mean [95% interval over seeds]), a task run's exact match per encoding and length (over
seeds, the mean [95% interval, clipped to [0, 1]]). Read back, they are the figure's numbers rounded as printed (2
or 3 decimals); `lm_figure` and `task_figure` draw them as `posformer plot` draws a run.

    cell "4.86 [4.79, 4.94]" -> (4.86, 4.79, 4.94);  "198.23" or "0.000" -> (value, None, None);  "n/a" -> None
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from posformer.experiments.extrapolation.figure import draw_sets
from posformer.experiments.synthetic.figure import TaskPanel, draw_panels

NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"
CELL = re.compile(rf"({NUMBER})(?: \[({NUMBER}), ({NUMBER})\])?")
LENGTH_HEADER = re.compile(r"(?:n=)?(\d[\d,]*)(?: \((\d+)L\))?")
PERPLEXITY_HEADING = re.compile(r"#+ (\S+): perplexity\b")
TASK_HEADING = re.compile(r"#+ `([^`]+)`: trained at 1\.\.(\d+)")
SEEDS = re.compile(r"(\d+) seeds \(\d")
PROTOCOL = re.compile(r"[Pp]rotocol:? (\w+)")


@dataclass
class Table:
    """A markdown table and the heading above it: header (the column titles), rows (the cells of each line)."""

    heading: str
    header: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """Every table of a markdown text (a line of cells, a |---| line, then lines of cells), with the last heading
    above it."""
    lines, found, heading, k = text.splitlines(), [], "", 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("#"):
            heading = line
        elif line.startswith("|") and k + 1 < len(lines) and re.fullmatch(r"\|[\s:|-]+\|?", lines[k + 1].strip()):
            body, k = [], k + 2
            while k < len(lines) and lines[k].startswith("|"):
                body.append(_cells(lines[k]))
                k += 1
            found.append(Table(heading, _cells(line), body))
            continue
        k += 1
    return found


def parse_cell(text: str) -> tuple[float, float | None, float | None] | None:
    """A value cell: (value, low, high), low and high None without an interval; None for "n/a" and other words."""
    match = CELL.fullmatch(text.strip())
    if match is None:
        return None
    value, low, high = (None if g is None else float(g.replace(",", "")) for g in match.groups())
    return value, low, high


def _lengths(header: list[str], where: str) -> tuple[list[int], int | None]:
    """The lengths of a table's columns after the first ("64 (1L)", "n=8"), and the one marked 1L."""
    lengths, train_len = [], None
    for title in header[1:]:
        match = LENGTH_HEADER.fullmatch(title)
        if match is None:
            raise ValueError(f"{where}: column {title!r} is not a length (expected '64 (1L)' or 'n=8')")
        lengths.append(int(match.group(1).replace(",", "")))
        if match.group(2) == "1":
            train_len = lengths[-1]
    return lengths, train_len


def _curves(table: Table, lengths: list[int]) -> dict[str, list[tuple[int, float, float | None, float | None]]]:
    curves = {}
    for cells in table.rows:
        points = [(n, *cell) for n, text in zip(lengths, cells[1:]) if (cell := parse_cell(text)) is not None]
        curves[cells[0]] = points
    return curves


@dataclass
class LmTables:
    """An extrapolation run's perplexity tables: curves {eval set: {row: [(length, ppl, low, high)]}}."""

    curves: dict[str, dict[str, list[tuple[int, float, float | None, float | None]]]]
    train_len: int
    eval_lens: list[int]
    protocol: str
    seeds: int


def lm_tables(text: str, where: str = "the text") -> LmTables:
    """The perplexity tables ("#### gutenberg: perplexity") of an extrapolation report's text."""
    curves, lengths, train_len = {}, [], None
    for table in tables(text):
        match = PERPLEXITY_HEADING.match(table.heading)
        if match:
            lengths, train_len = _lengths(table.header, where)
            curves[match.group(1)] = _curves(table, lengths)
    protocol, seeds = PROTOCOL.search(text), SEEDS.search(text)
    if not curves or train_len is None or protocol is None:
        raise ValueError(f"{where}: no perplexity table with a '(1L)' column and a protocol was found")
    return LmTables(curves, train_len, lengths, protocol.group(1), int(seeds.group(1)) if seeds else 1)


def task_panels(text: str, where: str = "the text") -> tuple[list[TaskPanel], int]:
    """The accuracy tables ("#### `copy`: trained at 1..8") of a task report's text, and its number of seeds."""
    panels = []
    for table in tables(text):
        match = TASK_HEADING.match(table.heading)
        if match:
            lengths, _ = _lengths(table.header, where)
            panels.append(TaskPanel(match.group(1), int(match.group(2)), lengths, _curves(table, lengths)))
    if not panels:
        raise ValueError(f"{where}: no task accuracy table (a heading '`TASK`: trained at 1..N') was found")
    seeds = SEEDS.search(text)
    return panels, int(seeds.group(1)) if seeds else 1


def lm_figure(text: str, path: str | Path, where: str = "the text") -> Path:
    """ppl.png of the extrapolation report in `text`, drawn as `posformer plot` draws its run."""
    found = lm_tables(text, where)
    bars = (
        f"geometric mean of {found.seeds} seeds, bars: 95% interval over seeds"
        if found.seeds > 1
        else "one seed, no intervals in its tables"
    )
    return draw_sets(found.curves, found.train_len, found.eval_lens, found.protocol, bars, path)


def task_figure(text: str, path: str | Path, where: str = "the text") -> Path:
    """tasks-summary.png of the task report in `text`, drawn as `posformer plot` draws its runs."""
    panels, seeds = task_panels(text, where)
    note = f"mean of {seeds} seeds, bars: 95% interval over seeds" if seeds > 1 else "one seed"
    return draw_panels(panels, path, note)
