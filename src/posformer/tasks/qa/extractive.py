"""Extractive question answering (`--head span`) as library code: training tensors and batched prediction.

    features = span_train_tensors(train_examples, tokenizer, 384, 128, model.cfg)   # for a feature sampler
    predictor = SpanPredictor(tokenizer, eval_examples, 384, 128)
    predictions, null_odds, answers = predictor.predict(model)
    evaluate = QAEvaluator(predictor)                                                 # Trainer(evaluate=...)

The logic is run_qa.py's (see `posformer.tasks.qa.span`): question first, context windows
overlapping by `doc_stride` tokens, start/end logits, the n-best spans of every window, the
maximum answer length, the minimum null (CLS) score over the windows and a threshold.
The model is any posformer `Transformer` with the "span_qa" head (`pf.from_hf(dir, head="span_qa")`
starts one from a BERT-family base checkpoint).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.tasks.qa.predictor import QAPredictions, check_windows
from posformer.tasks.qa.span import postprocess_span_predictions, span_eval_features, span_training_features
from posformer.tasks.qa.windows import QAExampleLike
from posformer.utils.validation import check_int, check_number

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _check_span_model(model: nn.Module) -> None:
    cfg = getattr(model, "cfg", None)
    if cfg is not None and cfg.head_kind != "span_qa":
        raise ValueError(
            f"extractive QA needs a model with the 'span_qa' head, this one has {cfg.head_kind!r}; "
            "start one from a base checkpoint with pf.from_hf(path, head='span_qa')"
        )


def _model_inputs(features: dict[str, Any], cfg: Config | None) -> list[str]:
    """The feature tensors the model takes: token_type_ids only when it has token-type embeddings."""
    keys = [k for k in MODEL_INPUTS if k in features]
    if cfg is not None and not cfg.type_vocab_size and "token_type_ids" in keys:
        keys.remove("token_type_ids")
    return keys


def span_train_tensors(
    examples: Sequence[QAExampleLike], tokenizer, max_seq_length: int, doc_stride: int, cfg: Config | None = None
) -> dict[str, Tensor]:
    """The training set as tensors with one row per window, ready for a sampler of rows.

    Keys: input_ids, attention_mask (and token_type_ids when the tokenizer makes them and
    `cfg`, if given, has token-type embeddings), all (n_windows, max_seq_length) long;
    start_positions, end_positions (n_windows,) long: the first gold answer's first and last
    token, or the CLS index for an unanswerable question or a window that does not hold the
    whole answer (run_qa.py's labels). Every row is a valid set of model keyword arguments.
    """
    if not examples:
        raise ValueError("no training examples for extractive QA")
    features = span_training_features(examples, tokenizer, max_seq_length, doc_stride)
    keep = _model_inputs(features, cfg) + ["start_positions", "end_positions"]
    return {k: features[k] for k in keep}


@torch.no_grad()
def span_logits(
    model: nn.Module, features: dict[str, Any], batch_size: int = 32
) -> tuple[Tensor, Tensor, torch.dtype | None]:
    """Start and end logits, each (n_windows, max_seq_length) float32 on the CPU, for eval `features`, and the
    dtype the model computed them in (bfloat16 under bf16 autocast; None without windows).

    The rows go through the model longest first, so each batch holds windows of similar
    length, and each batch is cut to its longest row (attention_mask); the cut positions
    (padding) get -inf. The model is put in eval mode and its mode restored after.
    """
    _check_span_model(model)
    check_int("batch_size", batch_size)
    keys = _model_inputs(features, getattr(model, "cfg", None))
    rows, width = features["input_ids"].shape
    device = next(model.parameters()).device
    start = torch.full((rows, width), -math.inf)
    end = torch.full((rows, width), -math.inf)
    computed_in = None
    was_training = model.training
    model.eval()
    try:
        lengths = features["attention_mask"].sum(dim=1) if "attention_mask" in features else torch.full((rows,), width)
        order = torch.sort(lengths, descending=True, stable=True).indices
        for part in order.split(batch_size):
            length = int(lengths[part].max())
            batch = {k: features[k][part, :length].to(device) for k in keys}
            out = model(**batch)
            start[part, :length] = out.start_logits.float().cpu()
            end[part, :length] = out.end_logits.float().cpu()
            computed_in = out.start_logits.dtype
    finally:
        model.train(was_training)
    return start, end, computed_in


class SpanPredictor:
    """Answers `examples` with a span-QA model: windows -> start/end logits -> best span over all windows.

    The eval windows (`span_eval_features`) are built once, here; `predict` runs the model over
    them in batches of `batch_size` and post-processes the logits
    (`postprocess_span_predictions`: n_best_size, max_answer_length, null_score_diff_threshold).
    """

    def __init__(
        self,
        tokenizer,
        examples: Sequence[QAExampleLike],
        max_seq_length: int,
        doc_stride: int,
        *,
        batch_size: int = 32,
        n_best_size: int = 20,
        max_answer_length: int = 30,
        null_score_diff_threshold: float = 0.0,
    ) -> None:
        check_windows(examples, max_seq_length, doc_stride)
        for name, value in (
            ("batch_size", batch_size),
            ("n_best_size", n_best_size),
            ("max_answer_length", max_answer_length),
        ):
            check_int(name, value)
        check_number("null_score_diff_threshold", null_score_diff_threshold)
        self.examples = list(examples)
        self.batch_size, self.n_best_size, self.max_answer_length = batch_size, n_best_size, max_answer_length
        self.null_score_diff_threshold = null_score_diff_threshold
        self.features = span_eval_features(self.examples, tokenizer, max_seq_length, doc_stride)
        self.logits_dtype: str | None = None

    def predict(self, model: nn.Module) -> QAPredictions:
        """(predictions, null odds, best non-empty answers) id -> value; see `QAPredictions`."""
        start, end, computed_in = span_logits(model, self.features, self.batch_size)
        self.logits_dtype = str(computed_in).removeprefix("torch.")
        return postprocess_span_predictions(
            self.examples,
            self.features,
            start,
            end,
            self.n_best_size,
            self.max_answer_length,
            self.null_score_diff_threshold,
        )
