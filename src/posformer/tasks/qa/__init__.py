"""SQuAD v2 question answering, the seed job (`posformer qa`): Hugging Face's `run_qa.py` (span head) and
`run_seq2seq_qa.py` (seq2seq head) as library code.

| module | what |
|---|---|
| job | the job behind `qa train` and `qa eval`: options, data, model, training, evaluation |
| models | the default pretrained start, any checkpoint loaded with its QA head, tokenizer files |
| span | extractive QA over doc_stride windows (run_qa.py's logic) |
| extractive | the span head's training tensors and batched prediction |
| seq2seq | generative (T5-style) QA: tokenizer, scratch model, batches, prediction |
| windows | generative QA over long contexts, with doc_stride windows |
| predictor | what every predictor shares: bound to its questions, it answers them with a model |
| null_answers | questions without an answer: null training windows, the calibrated null threshold |
| evaluation | predictions, best non-empty answers and null odds, the official report |
| squad_metric | the official SQuAD v2.0 evaluation (exact match, F1, HasAns/NoAns, best thresholds) |
| feature_batches | deterministic, resumable, shardable batches of precomputed feature rows |
| resume | `qa train --resume`: which options a resumed run applies or refuses |
| ask | `qa ask`: ask a trained model about a text; `pipeline`, the same from Python |

    from posformer.tasks.qa import pipeline
    qa = pipeline("runs/qa")                 # a `qa train` run, a checkpoint or a model dir; loaded once
    qa(question="Who wrote it?", context="It was written by Ada.").answer
    qa([{"question": ..., "context": ...}, ...])   # a list of `Answer`s, in order
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from posformer.tasks.qa.ask import QuestionAnswerer
    from posformer.tasks.qa.options import QAJobOptions


def pipeline(path: str | Path, options: "QAJobOptions | None" = None) -> "QuestionAnswerer":
    """The QA model at `path`, loaded once, to call as Hugging Face's `pipeline("question-answering")` is called:
    with question= and context=, or a list of {"question", "context"} records (`ask.QuestionAnswerer`)."""
    from posformer.tasks.qa.ask import QuestionAnswerer

    return QuestionAnswerer(path, options)
