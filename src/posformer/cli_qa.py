"""`posformer qa`: the SQuAD v2 question-answering job's sub-commands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cmd_score(args: argparse.Namespace) -> int:
    """Print the official SQuAD v2.0 scores of a predictions file, as `evaluate-v2.0.py` does."""
    from posformer.data.squad import load_qa_file
    from posformer.tasks.squad_metric import read_json_mapping, squad_v2_evaluate

    gold = load_qa_file(args.eval_file, args.context_column, args.question_column, args.answer_column,
                        for_training=False)
    predictions = read_json_mapping(args.predictions, "predictions")
    bad = [qid for qid, text in predictions.items() if not isinstance(text, str)]
    if bad:
        raise ValueError(f"predictions file {args.predictions}: the values of {bad[:5]} are not strings")
    na_probs = None
    if args.na_probs is not None:
        na_probs = {qid: float(p) for qid, p in read_json_mapping(args.na_probs, "no-answer probabilities").items()}
    report = squad_v2_evaluate(gold.examples, predictions, na_probs, args.na_prob_thresh)
    text = json.dumps(report, indent=2)
    if args.out_file:
        Path(args.out_file).write_text(text + "\n")
    print(text)
    return 0


def add_qa_parser(sub: argparse._SubParsersAction) -> None:
    qa = sub.add_parser("qa", help="SQuAD v2 question answering: score predictions (train and eval: see --help)",
                        description="The SQuAD v2 question-answering job.")
    commands = qa.add_subparsers(dest="qa_command", metavar="QA_COMMAND", required=True)
    score = commands.add_parser(
        "score", help="the official SQuAD v2.0 scores of a predictions file",
        description="Print the official SQuAD v2.0 evaluation (exact, f1, HasAns_*, NoAns_*, and best_* with "
                    "--na-probs) of a predictions file (id -> answer text, \"\" for no answer) against a data "
                    "file: a drop-in for the official evaluate-v2.0.py, with the same numbers.",
    )
    score.add_argument("--eval-file", dest="eval_file", required=True,
                       help="gold data: SQuAD JSON, or JSON/JSONL records with the named columns")
    score.add_argument("--predictions", required=True, help="predictions.json: {id: text}")
    score.add_argument("--na-probs", dest="na_probs", help="null_odds.json / no-answer probabilities: {id: float}")
    score.add_argument("--na-prob-thresh", dest="na_prob_thresh", type=float, default=1.0,
                       help="predict no answer when the no-answer probability exceeds this (default: 1.0)")
    score.add_argument("--out-file", dest="out_file", help="also write the scores (JSON) here")
    score.add_argument("--context-column", dest="context_column", default="context")
    score.add_argument("--question-column", dest="question_column", default="question")
    score.add_argument("--answer-column", dest="answer_column", default="answers")
    score.set_defaults(func=cmd_score)
