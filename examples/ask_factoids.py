"""Ask a trained QA model plain factoid questions about new text and count the right answers.

    python examples/ask_factoids.py runs/demo                       # examples/factoid_questions.jsonl
    python examples/ask_factoids.py runs/demo-seq2seq --questions my_questions.jsonl --threshold 0

Each JSON line holds a "context", a "question" and the "gold" answer. An answer is right when, normalised as the
SQuAD metric normalises answers (lower case, no punctuation or articles), it equals the gold answer. The texts of
the shipped file were written for this check, not taken from SQuAD, so no model of the demos trained on them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from posformer.tasks.qa import pipeline
from posformer.tasks.qa.options import QAJobOptions
from posformer.tasks.qa.squad_metric import normalize_answer

MAX_QUESTIONS_BYTES = 1 << 20  # a JSON-lines file of questions read at most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a `qa train` run dir, a checkpoint or a model dir")
    parser.add_argument("--questions", default=str(Path(__file__).with_name("factoid_questions.jsonl")))
    parser.add_argument(
        "--threshold", type=float, default=None, help="--null-score-diff-threshold (default: the training run's)"
    )
    parser.add_argument(
        "--null-score", default=None, help="seq2seq: decoder, encoder-span or both (default: the run's)"
    )
    args = parser.parse_args()
    questions = Path(args.questions)
    if questions.stat().st_size > MAX_QUESTIONS_BYTES:
        parser.error(f"--questions {questions} is over {MAX_QUESTIONS_BYTES:,} bytes: expected a few questions")
    lines = questions.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    answer = pipeline(args.model, QAJobOptions(null_score_diff_threshold=args.threshold, null_score=args.null_score))
    right = 0
    for record in records:
        result = answer(question=record["question"], context=record["context"])
        ok = normalize_answer(result.answer) == normalize_answer(record["gold"])
        right += ok
        best = "" if result.answer else f' (best candidate: "{result.best}")'
        print(f"{'right' if ok else 'wrong'}: {record['question']} -> {result.answer or 'no answer'}{best}")
    print(f"{right} of {len(records)} answered right")


if __name__ == "__main__":
    main()
