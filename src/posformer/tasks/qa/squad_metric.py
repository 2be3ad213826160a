"""The official SQuAD v2.0 evaluation (exact match, F1, HasAns/NoAns, best no-answer thresholds).

Written for posformer from the definition of the official ``evaluate-v2.0.py``; on the same data,
predictions and no-answer probabilities it gives the same numbers:

- answers are compared after `normalize_answer` (lowercase, punctuation removed, the articles
  a/an/the removed, whitespace collapsed);
- exact and F1 of a question are the maximum over its gold answers; gold answers that normalize to ""
  are ignored, and a question with no gold answer scores 1 only for a prediction that normalizes to "";
- a question is answerable (HasAns) when it has at least one gold answer in the data;
- with no-answer probabilities, a question whose probability exceeds ``na_prob_thresh`` counts as
  predicted unanswerable, and best_exact/best_f1 are the best scores over all thresholds (`best_threshold`).

Scores are percentages (x100), as in the official script. One deliberate difference: the official
script fails with a KeyError when a question has no prediction; here the question scores 0 (exact and F1),
stays in the totals, and a warning names it.
"""

from __future__ import annotations

import logging
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from posformer.utils.safe_write import make_dirs, write_json_atomic

log = logging.getLogger(__name__)

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lowercase, remove ASCII punctuation, remove the words a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_tokens(text: str) -> list[str]:
    """The whitespace tokens of the normalized text."""
    return normalize_answer(text).split()


def exact_score(gold: str, prediction: str) -> int:
    """1 when gold and prediction are equal after normalization, else 0."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold: str, prediction: str) -> float:
    """Token-level F1 of the normalized texts (bag of tokens); 1/0 when either side is empty."""
    gold_tokens, pred_tokens = answer_tokens(gold), answer_tokens(prediction)
    if not gold_tokens or not pred_tokens:
        return float(gold_tokens == pred_tokens)
    overlap = sum((Counter(gold_tokens) & Counter(pred_tokens)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_answers(data: Mapping[str, Sequence[str]] | Iterable[Any]) -> dict[str, list[str]]:
    """Question id -> gold answer texts, from a mapping or from examples with ``id`` and ``answers``."""
    if isinstance(data, Mapping):
        return {str(k): list(v) for k, v in data.items()}
    return {str(ex.id): list(ex.answers) for ex in data}


def raw_scores(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-question exact and F1 (0/1 scale, before any threshold). A missing prediction scores 0."""
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    for qid, texts in gold.items():
        if qid not in predictions:
            exact[qid] = f1[qid] = 0.0
            continue
        pred = predictions[qid]
        golds = [t for t in texts if normalize_answer(t)] or [""]
        exact[qid] = float(max(exact_score(g, pred) for g in golds))
        f1[qid] = max(f1_score(g, pred) for g in golds)
    return exact, f1


def apply_threshold(
    scores: Mapping[str, float], na_probs: Mapping[str, float], has_answer: Mapping[str, bool], na_prob_thresh: float
) -> dict[str, float]:
    """A question whose no-answer probability exceeds the threshold scores 1 if unanswerable, else 0."""
    return {
        qid: (float(not has_answer[qid]) if qid in na_probs and na_probs[qid] > na_prob_thresh else s)
        for qid, s in scores.items()
    }


def _summary(exact: Mapping[str, float], f1: Mapping[str, float], qids: Sequence[str]) -> dict[str, Any]:
    total = len(qids)
    return {
        "exact": 100.0 * sum(exact[q] for q in qids) / total,
        "f1": 100.0 * sum(f1[q] for q in qids) / total,
        "total": total,
    }


def best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """The best score (percent) over no-answer thresholds and the threshold reaching it (official logic).

    Start with every question predicted unanswerable; visit questions in increasing no-answer probability,
    turning each into "answered" (gain its score if answerable, lose 1 if unanswerable and the prediction
    is non-empty); keep the best running score and the probability where it was first reached.
    """
    missing = {q for q in scores if q not in predictions}
    current = sum(1 for q, has in has_answer.items() if not has and q not in missing)
    best, thresh = current, 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores or qid in missing:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, thresh = current, na_probs[qid]
    return 100.0 * best / len(scores), thresh


def squad_v2_evaluate(
    gold: Mapping[str, Sequence[str]] | Iterable[Any],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, Any]:
    """The official SQuAD v2.0 report for ``predictions`` (id -> text) against ``gold``.

    ``gold`` is a mapping id -> gold texts or examples with ``id``/``answers`` (e.g. `QAExample`).
    Keys: exact, f1, total, HasAns_* and NoAns_* (when such questions exist), and with ``na_probs``
    (id -> no-answer probability) best_exact, best_exact_thresh, best_f1, best_f1_thresh.
    """
    golds = gold_answers(gold)
    if not golds:
        raise ValueError("no gold questions to evaluate")
    missing = [q for q in golds if q not in predictions]
    if missing:
        log.warning(
            "%d question(s) have no prediction and score 0: %s%s",
            len(missing),
            ", ".join(missing[:5]),
            ", ..." if len(missing) > 5 else "",
        )
    has_answer = {q: bool(texts) for q, texts in golds.items()}
    probs = dict(na_probs) if na_probs is not None else {q: 0.0 for q in predictions}
    lacking = [q for q in golds if q in predictions and q not in probs]
    if lacking:
        raise ValueError(
            f"no-answer probabilities are missing for {len(lacking)} predicted question(s): {', '.join(lacking[:5])}"
        )
    exact_raw, f1_raw = raw_scores(golds, predictions)
    exact = apply_threshold(exact_raw, probs, has_answer, na_prob_thresh)
    f1 = apply_threshold(f1_raw, probs, has_answer, na_prob_thresh)
    report = _summary(exact, f1, list(golds))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, has in has_answer.items() if has is wanted]
        if qids:
            report.update({f"{prefix}_{k}": v for k, v in _summary(exact, f1, qids).items()})
    if na_probs is not None:
        report["best_exact"], report["best_exact_thresh"] = best_threshold(predictions, exact_raw, probs, has_answer)
        report["best_f1"], report["best_f1_thresh"] = best_threshold(predictions, f1_raw, probs, has_answer)
    return report


def write_predictions(
    out_dir: str | Path, predictions: Mapping[str, str], null_odds: Mapping[str, float] | None = None
) -> dict[str, Path]:
    """Write ``predictions.json`` (id -> text) and, if given, ``null_odds.json`` (id -> float), atomically.

    These are the files the official script reads as ``pred_file`` and ``--na-prob-file``.
    Returns the paths written, keyed "predictions" and "null_odds".
    """
    out = Path(out_dir)
    make_dirs(out)
    paths = {"predictions": out / "predictions.json"}
    write_json_atomic(paths["predictions"], {str(k): str(v) for k, v in predictions.items()})
    if null_odds is not None:
        paths["null_odds"] = out / "null_odds.json"
        write_json_atomic(paths["null_odds"], {str(k): float(v) for k, v in null_odds.items()})
    return paths


def read_json_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """Read a JSON object file (predictions or no-answer probabilities); errors name the file."""
    from posformer.utils.file_limits import DATA
    from posformer.utils.user_files import read_json_file

    obj = read_json_file(path, f"{what} file", DATA)
    if not isinstance(obj, dict):
        raise ValueError(f"{what} file {path} must hold a JSON object id -> value, got {type(obj).__name__}")
    return obj
