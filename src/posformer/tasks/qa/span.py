"""Extractive question answering (run_qa.py logic) with doc_stride windows.

Features are built by a fast tokenizer with the question first and the context second,
truncation="only_second", overflowing windows that overlap by `doc_stride` tokens, and
character offsets. Post-processing takes the best span over ALL windows of an example,
so a later window never overwrites a better earlier one, and compares it with the
minimum null (CLS) score over the windows.

Examples only need the attributes `id`, `question`, `context`, `answers` and
`answer_starts` (see `posformer.tasks.qa.windows.QAExampleLike`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Sequence

import torch
from torch import Tensor

from posformer.tasks.qa.predictor import QAPredictions
from posformer.tasks.qa.windows import QAExampleLike


def _check_questions_fit(
    examples: Sequence[QAExampleLike], questions: list[str], tokenizer, max_seq_length: int, doc_stride: int
) -> None:
    """Every window keeps the whole question: it must leave more than `doc_stride` context tokens per window."""
    frame = tokenizer.num_special_tokens_to_add(pair=True)
    for example, ids in zip(examples, tokenizer(questions, add_special_tokens=False)["input_ids"]):
        budget = max_seq_length - frame - len(ids)
        if budget <= doc_stride:
            raise ValueError(
                f"example {example.id}: question of {len(ids)} tokens: the context budget per window "
                f"({budget} tokens) must exceed doc_stride ({doc_stride}); raise max_seq_length, "
                "lower doc_stride or shorten the question"
            )


def _encode(examples: Sequence[QAExampleLike], tokenizer, max_seq_length: int, doc_stride: int):
    if tokenizer.padding_side != "right":
        raise ValueError("span features put the question first and need padding_side='right'")
    questions = [e.question.lstrip() for e in examples]
    _check_questions_fit(examples, questions, tokenizer, max_seq_length, doc_stride)
    return tokenizer(
        questions,
        [e.context for e in examples],
        truncation="only_second",
        max_length=max_seq_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )


def _cls_index(input_ids: Sequence[int], tokenizer) -> int:
    cls_id = tokenizer.cls_token_id
    return input_ids.index(cls_id) if cls_id is not None and cls_id in input_ids else 0


def _context_range(sequence_ids: Sequence[int | None]) -> tuple[int, int]:
    """First and last token index of the context (sequence 1) in one window."""
    first = sequence_ids.index(1)
    last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
    return first, last


def _tensors(encoded, keys: Sequence[str]) -> dict[str, Tensor]:
    return {k: torch.tensor(encoded[k], dtype=torch.long) for k in keys if k in encoded}


def span_training_features(
    examples: Sequence[QAExampleLike], tokenizer, max_seq_length: int, doc_stride: int
) -> dict[str, Tensor]:
    """Training tensors, one row per window: input_ids, attention_mask, token_type_ids
    (when the tokenizer makes them), all (n_windows, max_seq_length), and start_positions,
    end_positions (n_windows,): the answer's first and last token, or the CLS index when
    the question is unanswerable or the first gold answer is not entirely inside the window.
    """
    encoded = _encode(examples, tokenizer, max_seq_length, doc_stride)
    starts, ends = [], []
    for row, offsets in enumerate(encoded["offset_mapping"]):
        example = examples[encoded["overflow_to_sample_mapping"][row]]
        cls = _cls_index(encoded["input_ids"][row], tokenizer)
        if not example.answers:
            starts.append(cls)
            ends.append(cls)
            continue
        start_char = example.answer_starts[0]
        end_char = start_char + len(example.answers[0])
        sequence_ids = encoded.sequence_ids(row)
        if 1 not in sequence_ids:
            starts.append(cls)
            ends.append(cls)
            continue
        first, last = _context_range(sequence_ids)
        if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
            starts.append(cls)
            ends.append(cls)
            continue
        token_start = first
        while token_start <= last and offsets[token_start][0] <= start_char:
            token_start += 1
        token_end = last
        while token_end >= first and offsets[token_end][1] >= end_char:
            token_end -= 1
        starts.append(token_start - 1)
        ends.append(token_end + 1)
    features = _tensors(encoded, ("input_ids", "attention_mask", "token_type_ids"))
    features["start_positions"] = torch.tensor(starts, dtype=torch.long)
    features["end_positions"] = torch.tensor(ends, dtype=torch.long)
    return features


def span_eval_features(
    examples: Sequence[QAExampleLike], tokenizer, max_seq_length: int, doc_stride: int
) -> dict[str, Any]:
    """Evaluation features, one row per window.

    Tensors input_ids, attention_mask (and token_type_ids), (n_windows, max_seq_length);
    lists example_id (n_windows,), cls_index (n_windows,) and offset_mapping
    (n_windows, max_seq_length) whose entries are (start, end) character offsets into the
    context for context tokens and None for question, special and padding tokens.
    """
    encoded = _encode(examples, tokenizer, max_seq_length, doc_stride)
    example_ids, cls_indices, offset_mapping = [], [], []
    for row, offsets in enumerate(encoded["offset_mapping"]):
        example_ids.append(examples[encoded["overflow_to_sample_mapping"][row]].id)
        cls_indices.append(_cls_index(encoded["input_ids"][row], tokenizer))
        sequence_ids = encoded.sequence_ids(row)
        offset_mapping.append([tuple(o) if sequence_ids[i] == 1 else None for i, o in enumerate(offsets)])
    features: dict[str, Any] = _tensors(encoded, ("input_ids", "attention_mask", "token_type_ids"))
    features["example_id"] = example_ids
    features["cls_index"] = cls_indices
    features["offset_mapping"] = offset_mapping
    return features


def _top(logits: Sequence[float], n: int) -> list[int]:
    return sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)[:n]


def postprocess_span_predictions(
    examples: Sequence[QAExampleLike],
    features: dict[str, Any],
    start_logits: Tensor | Sequence,
    end_logits: Tensor | Sequence,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    null_score_diff_threshold: float = 0.0,
) -> QAPredictions:
    """Answers from start/end logits of shape (n_windows, seq_len), one row per feature row.

    Per example: null score = min over its windows of start[CLS] + end[CLS]; the best
    non-null span over all its windows among the n_best start and end tokens of each
    window (start <= end, end - start + 1 <= max_answer_length, both tokens in the
    context). The prediction is "" when null score > best span score + threshold, else
    the span's context text. Returns (predictions id -> text, null odds id -> null score
    - best span score, +inf when no valid span exists, answers id -> the best span's text
    whatever the null score, "" when no valid span exists).
    """
    start_logits = torch.as_tensor(start_logits, dtype=torch.float64).tolist()
    end_logits = torch.as_tensor(end_logits, dtype=torch.float64).tolist()
    rows_of: dict[str, list[int]] = defaultdict(list)
    for row, example_id in enumerate(features["example_id"]):
        rows_of[example_id].append(row)
    predictions: dict[str, str] = {}
    answers: dict[str, str] = {}
    null_odds: dict[str, float] = {}
    for example in examples:
        null_score = math.inf
        best_text, best_score = "", -math.inf
        for row in rows_of.get(example.id, []):
            starts, ends, offsets = start_logits[row], end_logits[row], features["offset_mapping"][row]
            cls = features["cls_index"][row] if "cls_index" in features else 0
            null_score = min(null_score, starts[cls] + ends[cls])
            for s in _top(starts, n_best_size):
                for e in _top(ends, n_best_size):
                    if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                        continue
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    score = starts[s] + ends[e]
                    if score > best_score:
                        best_text, best_score = example.context[offsets[s][0] : offsets[e][1]], score
        answers[example.id] = best_text
        if best_score == -math.inf:
            predictions[example.id], null_odds[example.id] = "", math.inf
            continue
        null_odds[example.id] = null_score - best_score
        predictions[example.id] = "" if null_score > best_score + null_score_diff_threshold else best_text
    return QAPredictions(predictions, null_odds, answers)
