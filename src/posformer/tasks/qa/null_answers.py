"""Questions without an answer in the QA job: sampling the null training windows, calibrating the null threshold.

In SQuAD v2 about half the questions have no answer, and a question whose context spans several
windows adds a null window (the answer is elsewhere) for each extra window. Early in fine-tuning
the null class wins everywhere: every prediction is "" while the model has barely learnt to find
spans. Three levers, all off by default (run_qa.py's behaviour):

- `keep_null_windows(features, null, fraction, seed)` keeps a seeded share of the training
  windows whose target is "no answer", so more of each step goes to finding answers;
- `calibrate_null_threshold(...)` then sets the threshold between "answer" and "no answer" where
  F1 is best on held-out questions (training articles kept out of training), the official
  script's best_f1 threshold, instead of the fixed 0 that a skewed training mix no longer suits;
- a generative model trained with an encoder span loss can let that span head decide instead
  (`encoder_span_scores`, `qa train --null-score`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch
from torch import Tensor, nn

from posformer.tasks.qa.evaluation import NULL_ODDS_CLIP
from posformer.tasks.qa.predictor import QAPredictor
from posformer.tasks.qa.squad_metric import squad_v2_evaluate
from posformer.tasks.qa.windows import QAExampleLike


def keep_null_windows(features: Mapping[str, Tensor], null: Tensor, fraction: float, seed: int) -> dict[str, Tensor]:
    """The rows of `features` {name: (N, ...)} with every answer window and a share `fraction` of the null
    windows (`null`: (N,) bool), drawn with `seed`; the rows keep their order."""
    if fraction >= 1.0:
        return dict(features)
    draw = torch.rand(len(null), generator=torch.Generator().manual_seed(seed))
    keep = ~null | (draw < fraction)
    return {name: tensor[keep] for name, tensor in features.items()}


def span_null_windows(features: Mapping[str, Tensor], cls_token_id: int | None) -> Tensor:
    """(N,) bool: the span training windows labelled "no answer" (start at the window's CLS token)."""
    ids = features["input_ids"]
    cls = (ids == cls_token_id).int().argmax(dim=1) if cls_token_id is not None else torch.zeros(len(ids))
    return features["start_positions"] == cls


def seq2seq_null_windows(features: Mapping[str, Tensor], end_token: int) -> Tensor:
    """(N,) bool: the seq2seq training windows whose target is "" (the end token alone)."""
    return features["labels"][:, 0] == end_token


def calibrate_null_threshold(predictor: QAPredictor, head: str, model: nn.Module) -> float:
    """The `null_score_diff_threshold` of `head` that gives the best F1 on `predictor`'s (held-out) questions.

    The official best_f1 threshold t over the null odds answers a question when its odds are <= t:
    for the span head (run_qa.py: "" when null - best > threshold) that is threshold t; for seq2seq
    (answer when best - null > threshold) it is -t, nudged so that odds equal to t still answer.
    When no threshold beats answering nothing, the result answers nothing (+-NULL_ODDS_CLIP).
    """
    examples: Sequence[QAExampleLike] = predictor.examples
    _, null_odds, answers = predictor.predict(model)
    report = squad_v2_evaluate(examples, answers, null_odds)
    nothing = 100.0 * sum(not e.answers for e in examples) / len(examples)
    if report["best_f1"] <= nothing:
        return -NULL_ODDS_CLIP if head == "span" else NULL_ODDS_CLIP
    threshold = float(report["best_f1_thresh"])
    return threshold if head == "span" else -math.nextafter(threshold, math.inf)


def encoder_span_scores(
    start_logits: Tensor, end_logits: Tensor, context_tokens: Sequence[tuple[int, int]], max_answer_tokens: int
) -> tuple[Tensor, Tensor]:
    """The encoder span head's (null score, best span score) of each window, as run_qa.py scores a window.

    The null score is start + end at position 0, where the encoder's span loss puts "no answer"; the best span
    score is the largest start_i + end_j over the window's context tokens with i <= j < i + max_answer_tokens
    (-inf without context tokens). start_logits, end_logits: (B, S); context_tokens: B [first, end) ranges into
    the S positions -> two (B,) float32 tensors.
    """
    start, end = start_logits.float(), end_logits.float()
    width = start.shape[1]
    bounds = torch.tensor(context_tokens, dtype=torch.long, device=start.device).reshape(-1, 2)
    positions = torch.arange(width, device=start.device)
    inside = (positions >= bounds[:, :1]) & (positions < bounds[:, 1:])  # (B, S)
    best = torch.full(start.shape[:1], -math.inf, device=start.device)
    for length in range(min(max_answer_tokens, width)):  # spans of length + 1 tokens: start i, end i + length
        pairs = start[:, : width - length] + end[:, length:]
        allowed = inside[:, : width - length] & inside[:, length:]
        best = torch.maximum(best, pairs.masked_fill(~allowed, -math.inf).amax(dim=1))
    return start[:, 0] + end[:, 0], best
