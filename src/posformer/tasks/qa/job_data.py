"""Which questions the QA job trains, calibrates and evaluates on (`qa train`, `qa eval`).

--train-file / --eval-file (SQuAD JSON, or JSON/JSONL records with the named columns), or --dataset-name (Hugging
Face `datasets`, online). With no data flag the shipped sample is split by article (EVAL_FRACTION of its articles,
three of fifteen, are held out, `SPLIT_SEED`) and training also reads the shipped training-only articles (the
other twenty of the dev set: 32 training articles in all); a lone --train-file is split the same way, alone.
"""

from __future__ import annotations

from typing import Callable, Sequence

from posformer.data.squad import (
    QAData,
    QAExample,
    load_hf_dataset,
    load_qa_file,
    split_by_article,
    squad_more_training,
    squad_sample,
)
from posformer.tasks.qa.options import QAJobOptions

SPLIT_SEED = 0
EVAL_FRACTION = 0.2


def _limit(examples: Sequence[QAExample], count: int | None) -> list[QAExample]:
    return list(examples if count is None else examples[:count])


def _report(data: QAData, log: Callable[[str], None]) -> QAData:
    log(f"data: {len(data)} questions; {data.report.summary()}")
    return data


def load_eval_examples(o: QAJobOptions, log: Callable[[str], None] = print) -> list[QAExample]:
    """The evaluation questions: --eval-file, the --dataset-name validation split, or the sample's held-out article."""
    columns = (o.context_column, o.question_column, o.answer_column)
    if o.eval_file is not None:
        examples = _report(load_qa_file(o.eval_file, *columns, for_training=False), log).examples
    elif o.dataset_name is not None:
        examples = _report(
            load_hf_dataset(
                o.dataset_name, "validation", *columns, for_training=False, config_name=o.dataset_config_name
            ),
            log,
        ).examples
    else:
        data = _report(load_qa_file(o.train_file or squad_sample(), *columns, for_training=False), log)
        examples = split_by_article(data.examples, eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED)[1]
    return _limit(examples, o.max_eval_samples)


def load_train_examples(o: QAJobOptions, log: Callable[[str], None] = print) -> tuple[list[QAExample], list[QAExample]]:
    """(train, eval) questions for `qa train`, article-disjoint when both come from one file."""
    columns = (o.context_column, o.question_column, o.answer_column)
    if o.dataset_name is not None and o.train_file is not None:
        raise ValueError("give either --dataset-name or --train-file, not both")
    if o.dataset_name is not None:
        train = _report(
            load_hf_dataset(o.dataset_name, "train", *columns, config_name=o.dataset_config_name), log
        ).examples
    elif o.train_file is not None:
        train = _report(load_qa_file(o.train_file, *columns), log).examples
        if o.eval_file is None:
            train = split_by_article(train, eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED)[0]
    elif o.eval_file is not None:
        raise ValueError("--eval-file needs training data too: add --train-file or --dataset-name")
    else:
        train = split_by_article(
            _report(load_qa_file(squad_sample(), *columns), log).examples, eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED
        )[0]
        train += _report(load_qa_file(squad_more_training(), *columns), log).examples
    train = _limit(train, o.max_train_samples)
    if not train:
        raise ValueError("no training questions left (check --max-train-samples and the data)")
    same_file = o.eval_file is None and o.dataset_name is None  # its summary was just logged
    return train, load_eval_examples(o, (lambda _: None) if same_file else log)


def calibration_split(train: list[QAExample], fraction: float) -> tuple[list[QAExample], list[QAExample]]:
    """(training, calibration) questions: `fraction` of the training articles kept out of training to
    calibrate the null threshold (none for fraction 0)."""
    if not fraction:
        return train, []
    try:
        return split_by_article(train, eval_fraction=fraction, seed=SPLIT_SEED + 1)
    except ValueError as err:
        raise ValueError(f"--calibration-fraction {fraction}: {err}") from None
