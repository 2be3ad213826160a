"""A Unigram tokenizer trained by `tokenizers`, made the same in every process: one canonical vocabulary.

The `tokenizers` Unigram trainer counts words in a hash map whose order is random per
process, and two things leak that order into its output:

- the characters the corpus needs but the final model lacks get the scores
  min_score, min_score + 1e-4, ... in hash-set order (`UnigramTrainer::finalize`);
- the EM sums run over the words in hash-map order, so scores differ in their last
  bits (seen up to 4e-11) and pieces of equal score swap places (ids).

`canonical_unigram` removes both: the filler characters get their scores in character
order, every score is rounded to `SCORE_DIGITS` decimals, and the pieces are ordered by
score (descending), then by text. Special tokens keep their ids. The pieces themselves
and their segmentations are the trainer's (up to the rounding).
"""

from __future__ import annotations

import json
from collections import defaultdict

SCORE_DIGITS = 6
FILLER_STEP = 0.0001  # `min_score_penalty_delta` of the trainer's `finalize`


def _filler_scores(low: float, count: int) -> list[float]:
    """The trainer's scores of `count` filler characters, accumulated as it does (low, low + 1e-4, ...)."""
    scores, penalty = [], 0.0
    for _ in range(count):
        scores.append(low + penalty)
        penalty += FILLER_STEP
    return scores


def _order_fillers(pieces: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """`pieces` with the filler characters' scores handed out in character order instead of hash order."""
    if not pieces:
        return pieces
    low = min(score for _, score in pieces)
    singles: dict[float, list[str]] = defaultdict(list)
    for piece, score in pieces:
        if len(piece) == 1:
            singles[score].append(piece)
    fillers, penalty = [], 0.0
    while low + penalty in singles:
        fillers.extend(singles[low + penalty])
        penalty += FILLER_STEP
    if len(fillers) < 2:
        return pieces
    rescored = dict(zip(sorted(fillers), _filler_scores(low, len(fillers))))
    return [(piece, rescored.get(piece, score)) for piece, score in pieces]


def canonical_vocab(vocab: list, n_special: int) -> list[list]:
    """A Unigram model's [[piece, score], ...] in canonical form; the first `n_special` entries stay put."""
    special = [list(entry) for entry in vocab[:n_special]]
    pieces = _order_fillers([(str(piece), float(score)) for piece, score in vocab[n_special:]])
    rounded = sorted(((piece, round(score, SCORE_DIGITS)) for piece, score in pieces), key=lambda p: (-p[1], p[0]))
    return special + [[piece, score] for piece, score in rounded]


def canonical_unigram(tokenizer, n_special: int):
    """A `tokenizers.Tokenizer` (Unigram model) rebuilt with its canonical vocabulary (`canonical_vocab`)."""
    from tokenizers import Tokenizer

    data = json.loads(tokenizer.to_str())
    if data["model"].get("type") != "Unigram":
        raise ValueError(f"canonical_unigram: a {data['model'].get('type')} model, not Unigram")
    data["model"]["vocab"] = canonical_vocab(data["model"]["vocab"], n_special)
    return Tokenizer.from_str(json.dumps(data))
