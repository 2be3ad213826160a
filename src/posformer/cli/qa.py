"""`posformer qa`: the SQuAD v2 question-answering job's sub-commands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.tasks.qa.options import (
    COLUMNS,
    DATA_GROUP,
    PREDICTION_OPTIONS,
    SCRATCH_GROUP,
    AskOptions,
    QAJobOptions,
    ScoreOptions,
)
from posformer.tasks.qa.options import PRETRAINED_DEFAULTS as P
from posformer.tasks.qa.options import SCRATCH_DEFAULTS as S
from posformer.utils.options import options


def cmd_score(args: argparse.Namespace) -> int:
    """Print the official SQuAD v2.0 scores of a predictions file, as `evaluate-v2.0.py` does."""
    from posformer.data.squad import load_qa_file
    from posformer.tasks.qa.squad_metric import read_json_mapping, squad_v2_evaluate
    from posformer.utils.safe_write import write_text_atomic
    from posformer.utils.validation import is_number

    score = options_from_args(ScoreOptions, args)
    gold = load_qa_file(
        score.eval_file, score.context_column, score.question_column, score.answer_column, for_training=False
    )
    if score.out_file is not None and Path(score.out_file).is_dir():
        raise ValueError(f"--out-file {score.out_file} is a directory: expected the path of a JSON file to write")
    predictions = read_json_mapping(score.predictions, "predictions")
    bad = [qid for qid, text in predictions.items() if not isinstance(text, str)]
    if bad:
        raise ValueError(f"predictions file {score.predictions}: the values of {bad[:5]} are not strings")
    na_probs = None
    if score.na_probs is not None:
        na_probs = read_json_mapping(score.na_probs, "no-answer probabilities")
        bad = [qid for qid, p in na_probs.items() if not is_number(p)]
        if bad:
            raise ValueError(
                f"no-answer probabilities file {score.na_probs}: the values of {bad[:5]} are not finite numbers"
            )
    report = squad_v2_evaluate(gold.examples, predictions, na_probs, score.na_prob_thresh)
    text = json.dumps(report, indent=2)
    if score.out_file:
        write_text_atomic(score.out_file, text + "\n")
    print(text)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """`posformer qa train`: train, evaluate at the end, write the predictions and the report."""
    from posformer.tasks.qa.job import train_qa

    train_qa(options_from_args(QAJobOptions, args))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """`posformer qa eval`: predict with a trained model, print and write the report."""
    from posformer.tasks.qa.job import eval_qa

    eval_qa(options_from_args(QAJobOptions, args))
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    """`posformer qa ask`: answer questions about a text with a trained model, one line each."""
    import sys

    from posformer.tasks.qa.ask import ask, read_questions

    asked = options_from_args(AskOptions, args)
    questions = read_questions(asked.context, asked.context_file, asked.question or [], sys.stdin)
    for answer in ask(asked.model, questions, asked):
        print(json.dumps(answer.to_json(), ensure_ascii=False) if asked.json else answer.describe())
    return 0


# QA options are checked after parsing, by `check_options`, which names each by its flag for the command line and
# for Python alike; the parser only reads their types.
DATA = (
    "dataset_name",
    "dataset_config_name",
    "train_file",
    "eval_file",
    *COLUMNS,
    "max_train_samples",
    "max_eval_samples",
)
PREDICTION = (*PREDICTION_OPTIONS, "per_device_eval_batch_size")
TRAINING = (
    "per_device_train_batch_size",
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "warmup_ratio",
    "group_by_length",
    "weight_decay",
    "keep_null_windows",
    "cross_attention_init",
    "decoder_layers",
    "pointer_generator",
    "encoder_span_loss",
    "dropout",
    "calibration_fraction",
)
RUN = ("output_dir", "eval_steps", "save_steps", "resume", "seed", "device", "precision", "progress")
SCRATCH = ("from_scratch", "tokenizer", "vocab_size", "d_model", "layers", "heads", "d_ff")
TRAIN_GROUPS = {DATA_GROUP: DATA, SCRATCH_GROUP: SCRATCH}


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    add_option_flags(
        parser,
        QAJobOptions,
        only=("model", "head", *DATA, *TRAINING, *PREDICTION, *RUN, *SCRATCH),
        defaults={"head": "seq2seq", "output_dir": "runs/qa"},
        underscored=True,
        groups=TRAIN_GROUPS,
        checked=False,
    )


def _add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    data = [name for name in DATA if name not in ("train_file", "max_train_samples")]
    add_option_flags(
        parser,
        QAJobOptions,
        only=("model", "head", *data, *PREDICTION, "output_dir", "device", "precision"),
        required=("model",),
        underscored=True,
        groups={DATA_GROUP: data},
        checked=False,
    )


def _add_ask_arguments(parser: argparse.ArgumentParser) -> None:
    ask_only = [opt.name for opt in options(AskOptions) if opt.name not in {o.name for o in options(QAJobOptions)}]
    add_option_flags(
        parser,
        AskOptions,
        only=("model", *ask_only, *PREDICTION),
        required=("model",),
        underscored=True,
        checked=False,
    )


def _add_score_arguments(parser: argparse.ArgumentParser) -> None:
    order = ("eval_file", "predictions", "na_probs", "na_prob_thresh", "out_file", *COLUMNS)
    add_option_flags(parser, ScoreOptions, only=order, checked=False)


SCORE = Command(
    "score",
    help="the official SQuAD v2.0 scores of a predictions file",
    description="Print the official SQuAD v2.0 evaluation (exact, f1, HasAns_*, NoAns_*, and best_* with "
    '--na-probs) of a predictions file (id -> answer text, "" for no answer) against a data '
    "file: a drop-in for the official evaluate-v2.0.py, with the same numbers.",
    add_arguments=_add_score_arguments,
    run=cmd_score,
)
TRAIN = Command(
    "train",
    help="train a SQuAD v2 model (seq2seq: T5 or BERT2BERT; or an extractive span head)",
    description="Train SQuAD v2 question answering with the flags of Hugging Face's run_seq2seq_qa.py "
    '(dashed or underscored). --head seq2seq (default) generates the answer ("" for none) '
    "from each doc_stride window, from an encoder-decoder checkpoint or a BERT2BERT model "
    "warm-started from a BERT checkpoint (Rothe et al. 2020; by default all-MiniLM-L6-v2); "
    "--head span predicts start/end tokens. Evaluation runs at the "
    "end (and every --eval-steps); checkpoints, metrics.jsonl, loss.png, run_config.yaml, "
    "predictions.json, answers.json, null_odds.json and eval_results.json go to --output-dir.",
    epilog=f"Defaults with a pretrained model (--model, or none: all-MiniLM-L6-v2): batch "
    f"{P['per_device_train_batch_size']}, lr {P['learning_rate']}, {P['num_train_epochs']:g} epochs, "
    f"max_seq_length {P['max_seq_length']}, doc_stride {P['doc_stride']}, no warm-up (the seed job's). "
    f"CPU-friendly defaults for the from-scratch seq2seq model (--from-scratch): batch "
    f"{S['per_device_train_batch_size']}, lr {S['learning_rate']}, {S['num_train_epochs']:g} epochs, "
    f"max_seq_length {S['max_seq_length']}, doc_stride {S['doc_stride']}, warm-up ratio "
    f"{S['warmup_ratio']}, a t5-preset model of --d-model/--layers/--heads/--d-ff and a tokenizer "
    "trained on the training texts.",
    add_arguments=_add_train_arguments,
    run=cmd_train,
)
EVAL = Command(
    "eval",
    help="evaluate a trained QA model on SQuAD v2 data",
    description="Predict with a trained model (a `qa train` output dir, which stands for its newest valid "
    "checkpoint, a checkpoint, or a model dir) and print the official SQuAD v2 report; write "
    "predictions.json, answers.json (best non-empty answers), null_odds.json (+-inf clipped to "
    "+-1e9) and eval_results.json into --output-dir (default: the model dir).",
    add_arguments=_add_eval_arguments,
    run=cmd_eval,
)
ASK = Command(
    "ask",
    help="ask a trained QA model questions about a text",
    description="Answer questions about a text with a trained model (a `qa train` output dir, which stands "
    "for its newest valid checkpoint, a checkpoint, or a model dir): each --question on --context "
    'or --context-file, or, with no --question, JSON lines {"context": ..., "question": ...} '
    "on stdin. Long contexts go through the doc_stride windows of evaluation. Prints each answer, "
    "or that there is none, with its score, one line per question (--json: one JSON object).",
    epilog='score: how much the model prefers its best answer to "no answer", the negated null odds of '
    "null_odds.json. span: the best span's start + end logits minus the [CLS] (no-answer) logits, the "
    'smallest over the windows; seq2seq: log p(best answer) minus log p("") of the best "" window. '
    "Both are log-odds: above 0 the model prefers its answer. needed: the score an answer must reach "
    "to be given, from --null-score-diff-threshold (the training run's, calibrated when it was trained "
    "with --calibration-fraction): its negation for span (reached at >=), the threshold itself for "
    "seq2seq (to beat). When there is no answer, the best candidate is shown with its score.",
    add_arguments=_add_ask_arguments,
    run=cmd_ask,
)
COMMAND = Command(
    "qa",
    help="SQuAD v2 question answering: train, eval, score, ask",
    description="The SQuAD v2 question-answering job.",
    subcommands=(SCORE, TRAIN, EVAL, ASK),
)
