"""Generative (T5-style) question answering over long contexts, with doc_stride windows.

The encoder input of a window is "question: {q} context: {window}" inside the tokenizer's own
special-token frame (T5: "... </s>"; BERT: "[CLS] ... [SEP]", see `special_token_frame`). Every
window keeps the whole question; only the context is split. The context is tokenized once (with
character offsets from a fast tokenizer) and cut into token windows of equal budget,
consecutive windows overlapping by exactly `doc_stride` tokens (the meaning of `stride`
in Hugging Face tokenizers and of `--doc_stride` in run_qa.py); the last window may be
shorter. Together the windows cover every context token.

Examples only need the attributes `id`, `question`, `context`, `answers` (list of str,
empty when unanswerable) and `answer_starts` (list of int, character offsets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
from torch import Tensor


class QAExampleLike(Protocol):
    """What the windowing needs from a QA example (e.g. posformer.data.squad.QAExample)."""

    id: str
    question: str
    context: str
    answers: list[str]
    answer_starts: list[int]


@dataclass(frozen=True)
class Seq2SeqWindow:
    """One encoder input for one example.

    input_ids: the full encoder input, special tokens included, len <= max_seq_length.
    char_span: (start, end) characters of the context this window covers (end exclusive).
    token_span: (start, end) indices into the context's own tokenization (end exclusive).
    target: the answer text if the first gold answer lies entirely inside char_span, else "".
    answer_tokens: (first, last) indices into input_ids of the tokens that hold that answer, or None when the
    target is "".
    context_tokens: [start, end) indices into input_ids of the window's context tokens.
    """

    example_id: str
    window_index: int
    input_ids: list[int]
    char_span: tuple[int, int]
    token_span: tuple[int, int]
    target: str
    answer_tokens: tuple[int, int] | None = None
    context_tokens: tuple[int, int] = (0, 0)


def special_token_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a single sequence.

    Found by encoding a probe text with and without special tokens, so it works for
    T5 (`[] , [</s>]`), BERT (`[CLS], [SEP]`) and raw `PreTrainedTokenizerFast`s whose
    post-processor adds them.
    """
    probe = "question"
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    raise ValueError("cannot locate the text inside the tokenizer's special-token template")


def question_prefix(question: str) -> str:
    """The text before the context in the encoder input: "question: {q} context:"."""
    return f"question: {question.strip()} context:"


def window_token_spans(n_tokens: int, budget: int, doc_stride: int) -> list[tuple[int, int]]:
    """Token windows [start, end) of at most `budget` tokens over `n_tokens` tokens.

    Consecutive windows overlap by exactly `doc_stride` tokens; the last one may be shorter.
    An empty context yields the single window (0, 0).
    """
    if budget <= doc_stride:
        raise ValueError(
            f"the context budget per window ({budget} tokens) must exceed doc_stride ({doc_stride}); "
            "raise max_seq_length or lower doc_stride"
        )
    if doc_stride < 0:
        raise ValueError(f"doc_stride must be >= 0, got {doc_stride}")
    spans = []
    start = 0
    while True:
        end = min(start + budget, n_tokens)
        spans.append((start, end))
        if end >= n_tokens:
            return spans
        start = end - doc_stride


def seq2seq_windows(example: QAExampleLike, tokenizer, max_seq_length: int, doc_stride: int) -> list[Seq2SeqWindow]:
    """All windows of one example, each "question: {q} context: {window}" plus special tokens.

    Raises ValueError when the question alone leaves no room for more than doc_stride
    context tokens (every window must keep the whole question).
    """
    before, after = special_token_frame(tokenizer)
    prefix = tokenizer(question_prefix(example.question), add_special_tokens=False)["input_ids"]
    encoded = tokenizer(example.context, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    budget = max_seq_length - len(before) - len(prefix) - len(after)
    try:
        spans = window_token_spans(len(ids), budget, doc_stride)
    except ValueError as err:
        raise ValueError(f"example {example.id}: question of {len(prefix)} tokens: {err}") from err
    answer = None
    if example.answers:
        answer = (example.answer_starts[0], example.answer_starts[0] + len(example.answers[0]))
    windows = []
    for index, (start, end) in enumerate(spans):
        chars = (offsets[start][0], offsets[end - 1][1]) if end > start else (0, 0)
        inside = answer is not None and chars[0] <= answer[0] and answer[1] <= chars[1]
        first = len(before) + len(prefix) - start  # input_ids index of context token 0
        tokens = _answer_tokens(offsets, start, end, answer) if inside else None
        windows.append(
            Seq2SeqWindow(
                example_id=example.id,
                window_index=index,
                input_ids=before + prefix + list(ids[start:end]) + after,
                char_span=chars,
                token_span=(start, end),
                target=example.answers[0] if inside else "",
                answer_tokens=None if tokens is None else (first + tokens[0], first + tokens[1]),
                context_tokens=(first + start, first + end),
            )
        )
    return windows


def _answer_tokens(
    offsets: Sequence[tuple[int, int]], start: int, end: int, answer: tuple[int, int]
) -> tuple[int, int] | None:
    """(first, last) context-token indices in [start, end) whose characters overlap the answer's [a, b), or None."""
    held = [k for k in range(start, end) if offsets[k][0] < answer[1] and answer[0] < offsets[k][1]]
    return (held[0], held[-1]) if held else None


def seq2seq_eval_windows(
    examples: Sequence[QAExampleLike], tokenizer, max_seq_length: int, doc_stride: int
) -> list[Seq2SeqWindow]:
    """The windows of every example, in order; each keeps `example_id` to map generations back."""
    return [w for example in examples for w in seq2seq_windows(example, tokenizer, max_seq_length, doc_stride)]


def pad_windows(windows: Sequence[Seq2SeqWindow], pad_id: int, length: int | None = None) -> dict[str, Tensor]:
    """Right-padded encoder batch: input_ids and attention_mask, both (len(windows), length).

    `length` defaults to the longest window.
    """
    length = length or max((len(w.input_ids) for w in windows), default=1)
    input_ids = torch.full((len(windows), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(windows), length), dtype=torch.long)
    for row, window in enumerate(windows):
        input_ids[row, : len(window.input_ids)] = torch.tensor(window.input_ids, dtype=torch.long)
        attention_mask[row, : len(window.input_ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def target_labels(texts: Sequence[str], tokenizer, max_target_length: int, end_token_id: int) -> Tensor:
    """Decoder labels (len(texts), max_target_length): each text's tokens without special tokens, cut to
    max_target_length - 1, then `end_token_id` ("" is the end token alone); -100 after it.

    No start token: the model's `shift_right` puts its decoder start in front (so a BERT tokenizer's
    [CLS] never becomes a label). For T5 tokenizers this is what `tokenizer(text)` gives ("... </s>").
    """
    labels = torch.full((len(texts), max_target_length), -100, dtype=torch.long)
    for row, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: max_target_length - 1] + [end_token_id]
        labels[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return labels


def seq2seq_training_features(
    examples: Sequence[QAExampleLike],
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_target_length: int,
    end_token_id: int,
    span_positions: bool = False,
) -> dict[str, Tensor]:
    """Training tensors for every window of every example.

    Windows containing the first gold answer are trained on its text; all other windows
    (and unanswerable questions) on "". Returns input_ids and attention_mask of shape
    (n_windows, max_seq_length), and labels of shape (n_windows, max_target_length) from
    `target_labels`: the target's tokens, then `end_token_id`, then -100. With `span_positions`, also
    start_positions and end_positions (n_windows,): the answer's first and last token in input_ids
    (`Seq2SeqWindow.answer_tokens`), 0 for a window whose target is "" (the encoder's span loss,
    `Config.encoder_span_loss`).
    """
    windows = seq2seq_eval_windows(examples, tokenizer, max_seq_length, doc_stride)
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        raise ValueError("the tokenizer has no pad token")
    batch = pad_windows(windows, pad_id, max_seq_length)
    batch["labels"] = target_labels([w.target for w in windows], tokenizer, max_target_length, end_token_id)
    if span_positions:
        spans = [w.answer_tokens or (0, 0) for w in windows]
        batch["start_positions"] = torch.tensor([s for s, _ in spans], dtype=torch.long)
        batch["end_positions"] = torch.tensor([e for _, e in spans], dtype=torch.long)
    return batch


def select_seq2seq_answer(
    candidates: Sequence[tuple[str, float]], null_score_diff_threshold: float = 0.0
) -> tuple[str, float]:
    """Pick one answer among the windows' generations of one example.

    candidates: (generated text, sequence score) per window; text that is empty after
    stripping whitespace counts as "". The null score is the *lowest* "" score over the windows, as run_qa.py
    takes the minimum null (CLS) score over an example's features: a window without the answer is right to
    say "", so the window least sure that there is nothing to answer speaks for the example. The best
    non-empty answer wins only if its score exceeds the null score by more than the threshold (no "" window:
    null score -inf). Returns (answer, null odds) where null odds = null score - best non-empty score
    (+inf when no window answered, -inf when every window answered).
    """
    null_scores = []
    best_text, best_score = "", -math.inf
    for text, score in candidates:
        text = text.strip()
        if not text:
            null_scores.append(score)
        elif score > best_score:
            best_text, best_score = text, score
    if best_score == -math.inf:
        return "", math.inf
    odds = min(null_scores, default=-math.inf) - best_score
    return kept_answer(best_text, odds, null_score_diff_threshold), odds


def kept_answer(answer: str, null_odds: float, null_score_diff_threshold: float) -> str:
    """`answer` when it beats "no answer" by more than the threshold (-null_odds > threshold), else ""."""
    return answer if answer and -null_odds > null_score_diff_threshold else ""
