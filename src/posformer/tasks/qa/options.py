"""The options of the QA job (`qa train`, `qa eval`): one dataclass, the defaults of each kind of model, and
the checks that name each bad option by its flag."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from posformer.utils.validation import check_choice, check_int, check_number, fail

HEADS = ("seq2seq", "span")
ANSWER_DEFAULTS = dict(max_answer_length=30, num_beams=1, null_score_diff_threshold=0.0, n_best_size=20)
PRETRAINED_DEFAULTS = dict(
    per_device_train_batch_size=12,
    learning_rate=3e-5,
    num_train_epochs=2.0,
    max_seq_length=384,
    doc_stride=128,
    warmup_ratio=0.0,
    **ANSWER_DEFAULTS,
)
SCRATCH_DEFAULTS = dict(
    per_device_train_batch_size=16,
    learning_rate=1e-3,
    num_train_epochs=10.0,
    max_seq_length=256,
    doc_stride=64,
    warmup_ratio=0.05,
    **ANSWER_DEFAULTS,
)
PREDICTION_OPTIONS = ("max_seq_length", "doc_stride", *ANSWER_DEFAULTS)


@dataclass
class QAJobOptions:
    """Every option of `qa train` / `qa eval`; None means "the default for this kind of model"."""

    head: str | None = None
    model: str | None = None
    dataset_name: str | None = None
    dataset_config_name: str | None = None
    train_file: str | None = None
    eval_file: str | None = None
    context_column: str = "context"
    question_column: str = "question"
    answer_column: str = "answers"
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    per_device_train_batch_size: int | None = None
    per_device_eval_batch_size: int = 32
    learning_rate: float | None = None
    num_train_epochs: float | None = None
    max_steps: int | None = None
    warmup_ratio: float | None = None
    weight_decay: float = 0.0
    max_seq_length: int | None = None
    doc_stride: int | None = None
    max_answer_length: int | None = None
    num_beams: int | None = None
    null_score_diff_threshold: float | None = None
    n_best_size: int | None = None
    output_dir: str | None = None
    eval_steps: int | None = None
    save_steps: int = 500
    seed: int = 42
    device: str = "auto"
    precision: str = "fp32"
    resume: bool = False
    from_scratch: bool = False
    tokenizer: str = "unigram"
    vocab_size: int = 4000
    d_model: int = 128
    layers: int = 2
    heads: int = 4
    d_ff: int = 512
    group_by_length: bool = True
    keep_null_windows: float = 1.0
    dropout: float | None = None
    calibration_fraction: float = 0.0
    progress: bool = True

    def resolved(self, defaults: dict[str, Any]) -> "QAJobOptions":
        """A copy whose unset (None) options take `defaults`."""
        return dataclasses.replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})


POSITIVE_INTS = (
    "max_seq_length",
    "doc_stride",
    "max_answer_length",
    "num_beams",
    "n_best_size",
    "per_device_eval_batch_size",
    "per_device_train_batch_size",
    "max_steps",
    "eval_steps",
    "save_steps",
    "max_train_samples",
    "max_eval_samples",
    "vocab_size",
    "d_model",
    "layers",
    "heads",
    "d_ff",
)
POSITIVE_NUMBERS = ("learning_rate", "num_train_epochs")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_options(o: QAJobOptions) -> None:
    """Every set option, named by its flag (`--doc-stride=0 is invalid: expected a positive integer`)."""
    check_choice("--head", o.head, HEADS)
    for name in POSITIVE_INTS:
        if getattr(o, name) is not None:
            check_int(_flag(name), getattr(o, name))
    for name in POSITIVE_NUMBERS:
        if getattr(o, name) is not None:
            check_number(_flag(name), getattr(o, name), low=0, low_open=True)
    if o.warmup_ratio is not None:
        check_number("--warmup-ratio", o.warmup_ratio, low=0, high=1)
    check_number("--weight-decay", o.weight_decay, low=0)
    check_number("--keep-null-windows", o.keep_null_windows, low=0, high=1, low_open=True)
    check_number("--calibration-fraction", o.calibration_fraction, low=0, high=1, high_open=True)
    if o.dropout is not None:
        check_number("--dropout", o.dropout, low=0, high=1, high_open=True)
    check_number("--null-score-diff-threshold", o.null_score_diff_threshold)
    check_int("--seed", o.seed, minimum=0)
    if o.from_scratch and (o.head != "seq2seq" or o.model is not None):
        fail(
            "--from-scratch",
            True,
            "only with --head seq2seq and without --model (it trains a new t5-preset model and tokenizer)",
        )
    if o.max_seq_length is not None and o.doc_stride is not None and o.doc_stride >= o.max_seq_length:
        fail("--doc-stride", o.doc_stride, f"an integer smaller than --max-seq-length ({o.max_seq_length})")
