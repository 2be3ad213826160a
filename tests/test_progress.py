"""`utils.progress.progress_bar`: tqdm's redrawn bar on a terminal, plain lines (no carriage returns) elsewhere."""

from __future__ import annotations

import io

from posformer.utils.progress import progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_whole_lines_and_a_terminal_the_redrawn_bar() -> None:
    log = io.StringIO()
    for _ in progress_bar(range(5), desc="steps", file=log, mininterval=0):
        pass
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and lines and all(line.startswith("steps:") for line in lines)
    assert "5/5" in lines[-1]
    terminal = Terminal()
    for _ in progress_bar(range(5), desc="steps", file=terminal, mininterval=0):
        pass
    assert "\r" in terminal.getvalue()


def test_a_log_is_written_at_most_every_interval() -> None:
    log = io.StringIO()
    for _ in progress_bar(range(1000), desc="steps", file=log):
        pass
    assert len(log.getvalue().splitlines()) <= 3  # the start, the end, and no redraw in between (30 s apart)
