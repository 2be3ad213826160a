"""The SQuAD v2.0 oracle of the tests: transformers' implementation of the official evaluate-v2.0.py."""

from __future__ import annotations

import functools
import importlib.util
import types
from pathlib import Path

import pytest


@functools.cache
def hf_squad_metrics() -> types.ModuleType:
    """transformers' squad_metrics.py, executed as is except its two package-relative imports.

    Importing it through the package takes several seconds (it pulls in tokenizers and torch); the
    functions used here (get_raw_scores, apply_no_ans_threshold, make_eval_dict, merge_eval,
    find_all_best_thresh) need only the standard library.
    """
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        pytest.skip("transformers is not installed")
    path = Path(spec.origin).parent / "data" / "metrics" / "squad_metrics.py"
    source = path.read_text()
    source = source.replace("from ...models.bert import BasicTokenizer\n", "BasicTokenizer = None\n")
    source = source.replace(
        "from ...utils import logging\n",
        "from types import SimpleNamespace\nfrom logging import getLogger\n"
        "logging = SimpleNamespace(get_logger=getLogger)\n",
    )
    module = types.ModuleType("hf_squad_metrics")
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def hf_evaluate(
    gold: dict[str, list[str]], preds: dict[str, str], na_probs: dict[str, float] | None, thresh: float = 1.0
) -> dict:
    """The official evaluate-v2.0.py main(), composed from transformers' functions."""
    hf = hf_squad_metrics()
    examples = [types.SimpleNamespace(qas_id=q, answers=[{"text": t} for t in texts]) for q, texts in gold.items()]
    has = {q: bool(texts) for q, texts in gold.items()}
    probs = na_probs if na_probs is not None else {q: 0.0 for q in preds}
    exact_raw, f1_raw = hf.get_raw_scores(examples, preds)
    exact = hf.apply_no_ans_threshold(exact_raw, probs, has, thresh)
    f1 = hf.apply_no_ans_threshold(f1_raw, probs, has, thresh)
    out = dict(hf.make_eval_dict(exact, f1))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, h in has.items() if h is wanted]
        if qids:
            hf.merge_eval(out, hf.make_eval_dict(exact, f1, qid_list=qids), prefix)
    if na_probs is not None:
        hf.find_all_best_thresh(out, preds, exact_raw, f1_raw, probs, has)
    return out


def assert_same(ours: dict, theirs: dict) -> None:
    """The same keys in the same order, the same values to 1e-9."""
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, rel=0, abs=1e-9), key
