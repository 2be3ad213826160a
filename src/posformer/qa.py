"""Question answering from Python, as `posformer qa ask` answers:

    import posformer as pf
    qa = pf.qa.pipeline("runs/qa")      # a `qa train` run, a checkpoint or a model dir; loaded once
    qa(question="Who wrote it?", context="It was written by Ada.").answer
    qa([{"question": ..., "context": ...}, ...])

Each call returns `Answer`s (`posformer.tasks.qa.ask`): the answer ("" for none), the best candidate, and its
score, the log-odds of that answer against no answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from posformer.tasks.qa.ask import QuestionAnswerer
    from posformer.tasks.qa.options import QAJobOptions


def pipeline(path: str | Path, options: "QAJobOptions | None" = None) -> "QuestionAnswerer":
    """The QA model at `path`, loaded once, to call with question= and context= (or a list of records)."""
    from posformer.tasks.qa.ask import QuestionAnswerer

    return QuestionAnswerer(path, options)
