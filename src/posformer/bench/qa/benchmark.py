"""`posformer bench --qa`: the span or the seq2seq comparison, as `QABenchOptions.head` picks."""

from __future__ import annotations

from typing import Any, Callable

from posformer.bench.qa import seq2seq, span
from posformer.bench.qa.compare import format_report
from posformer.bench.qa.options import QABenchOptions

__all__ = ["QABenchOptions", "format_report", "run"]


def run(options: QABenchOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The result of `posformer.bench.qa.span.run` or `posformer.bench.qa.seq2seq.run`."""
    return (seq2seq if options.head == "seq2seq" else span).run(options, log)
