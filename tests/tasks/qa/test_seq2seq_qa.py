"""Generative (T5-style) SQuAD v2 QA: overfit through the whole path, windowing, tokenizer, feature batches."""

from __future__ import annotations

import math
import time
import unicodedata
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import posformer as pf
from posformer.data.squad import QAExample, load_squad_json, squad_sample
from posformer.tasks.qa.evaluation import QAEvaluator
from posformer.tasks.qa.feature_batches import FeatureBatches
from posformer.tasks.qa.seq2seq import (
    Seq2SeqPredictor,
    bert2bert_token_ids,
    build_scratch_t5,
    end_token_id,
    match_in_context,
    qa_training_texts,
    seq2seq_train_tensors,
    train_qa_tokenizer,
)
from posformer.tasks.qa.windows import question_prefix, seq2seq_eval_windows, target_labels
from posformer.train.settings import TrainerSettings
from posformer.train.trainer import Trainer
from tiny_bert import save_tiny_bert

MAX_SEQ, STRIDE, ANSWER_TOKENS = 96, 32, 16
LONG_STRIDE = 16  # windows of the long context advance by more than a sentence


def _overfit_examples() -> list[QAExample]:
    """32 questions on the 8 shortest contexts of the shipped sample: 17 answerable, 15 not, 2-3 windows each."""
    examples = list(load_squad_json(squad_sample()))
    contexts = sorted({e.context for e in examples}, key=len)[:8]
    return [e for c in contexts for e in examples if e.context == c][:32]


def _scratch_t5(tmp_path, examples: list[QAExample]) -> tuple[pf.Transformer, object, dict, tuple[int, int]]:
    """A t5-preset model from scratch with a tokenizer of the examples' texts; its training settings and
    (max_seq_length, doc_stride)."""
    tokenizer = train_qa_tokenizer(qa_training_texts(examples), kind="unigram", vocab_size=800)
    torch.manual_seed(0)
    model = build_scratch_t5(
        tokenizer, d_model=64, n_layers=2, n_decoder_layers=2, n_heads=4, d_head=16, d_ff=128, dropout=0.0
    )
    return model, tokenizer, dict(steps=300, lr=3e-3, warmup=20), (MAX_SEQ, STRIDE)


def _bert2bert(tmp_path, examples: list[QAExample]) -> tuple[pf.Transformer, object, dict, tuple[int, int]]:
    """BERT2BERT warm-started from a tiny random BERT with all-MiniLM-L6-v2's (uncased) tokenizer."""
    bert = save_tiny_bert(
        tmp_path / "bert",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    tokenizer = pf.load_tokenizer(bert)
    torch.manual_seed(0)
    model = pf.hf.bert2bert_from_pretrained(bert, **bert2bert_token_ids(tokenizer))
    return model, tokenizer, dict(steps=300, lr=3e-3, warmup=20), (64, 24)  # WordPiece: fewer tokens per word


def _loose(text: str) -> str:
    """`text` lower-cased, without accents and whitespace (what an uncased WordPiece decoding may change)."""
    return "".join(
        c for c in unicodedata.normalize("NFD", text.lower()) if not c.isspace() and not unicodedata.combining(c)
    )


@pytest.mark.parametrize("build", [_scratch_t5, _bert2bert], ids=["scratch_t5", "bert2bert"])
def test_overfit_32_examples_reaches_90_exact(tmp_path, build):
    """windows -> Trainer -> generate every window -> select across windows -> official metric, for a
    t5-preset model from scratch and for BERT2BERT warm-started from a (tiny, random) BERT.

    Finding: a model that fits every window is near-certain of both its answers and its
    "" windows, so an answer's log-prob sum (a few tokens, e.g. -0.02) is below the best
    "" score of the example's other windows (one eos token, about -0.001), and at
    null_score_diff_threshold=0 the answer loses although every window's generation is
    right (exact ~59 here: every NoAns and the single-answer-window HasAns). A negative
    threshold lets an answer win over confident "" windows.
    """
    started = time.monotonic()
    examples = _overfit_examples()
    assert sum(e.is_impossible for e in examples) >= 8
    model, tokenizer, schedule, (max_seq, stride) = build(tmp_path, examples)
    batches = FeatureBatches(
        seq2seq_train_tensors(examples, tokenizer, max_seq, stride, ANSWER_TOKENS, end_token=model.cfg.eos_token_id),
        seed=0,
    )
    assert len(batches) > len(examples)  # several windows per example
    options = dict(max_seq_length=max_seq, doc_stride=stride, max_answer_tokens=ANSWER_TOKENS)
    evaluate = QAEvaluator(Seq2SeqPredictor(tokenizer, examples, null_score_diff_threshold=-1.0, **options))
    settings = TrainerSettings(
        **schedule, batch_size=16, weight_decay=0.0, eval_every=schedule["steps"], log_every=50, sample_prompt=None
    )
    result = Trainer(
        model, batches, settings, tmp_path / "run", evaluate=evaluate, progress=False, log=lambda _: None
    ).fit()
    assert result.losses[-1] < 0.1, result.losses[::25]
    report = result.evals[-1]
    assert report["exact"] >= 90.0, report
    assert report["HasAns_total"] > 0 and report["NoAns_total"] > 0

    windows = seq2seq_eval_windows(examples, tokenizer, max_seq, stride)
    predictions, null_odds, _ = Seq2SeqPredictor(tokenizer, examples, batch_size=64, **options).predict(model)
    assert set(predictions) == set(null_odds) == {e.id for e in examples}
    generated = _generate_each_window(model, tokenizer, windows)
    right = sum(_loose(g) == _loose(w.target) for g, w in zip(generated, windows))
    assert right >= 0.9 * len(windows), f"{right}/{len(windows)} windows generate their target"
    assert time.monotonic() - started < 300


def _generate_each_window(model, tokenizer, windows) -> list[str]:
    from posformer.tasks.qa.windows import pad_windows

    batch = pad_windows(windows, tokenizer.pad_token_id)
    tokens = model.generate(**batch, max_new_tokens=ANSWER_TOKENS + 1)
    return tokenizer.batch_decode(tokens[:, 1:], skip_special_tokens=True)


class _ReadingModel(nn.Module):
    """A stand-in reader: from a window whose text contains `answer` it generates the answer (score -0.05)
    and gives "" log-prob -4.0; from any other window it generates a wrong non-empty answer, "harbour"
    (score -3.0), and gives "" log-prob -2.0. It records the decoded encoder inputs it was given."""

    def __init__(self, tokenizer, answer: str) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))
        self.cfg = SimpleNamespace(
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer)
        )
        self.tokenizer = tokenizer
        self.answer = answer
        self.ids = {text: tokenizer(text, add_special_tokens=False)["input_ids"] for text in (answer, "harbour")}
        self.inputs: list[str] = []

    def _found(self, input_ids, attention_mask) -> list[bool]:
        return [
            self.answer in self.tokenizer.decode(ids[: sum(mask)], skip_special_tokens=True)
            for ids, mask in zip(input_ids.tolist(), attention_mask.tolist())
        ]

    def generate(
        self,
        input_ids,
        attention_mask,
        max_new_tokens,
        return_scores,
        eos_token_id,
        pad_token_id,
        min_new_tokens=0,
        **_,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        assert min_new_tokens == 1, "the non-empty answer of every window is generated"
        rows, scores = [], []
        for ids, mask, found in zip(
            input_ids.tolist(), attention_mask.tolist(), self._found(input_ids, attention_mask)
        ):
            self.inputs.append(self.tokenizer.decode(ids[: sum(mask)], skip_special_tokens=True))
            new = self.ids[self.answer if found else "harbour"] + [eos_token_id]
            rows.append([0] + new + [pad_token_id] * (max_new_tokens - len(new)))
            scores.append(-0.05 if found else -3.0)
        return torch.tensor(rows), torch.tensor(scores)

    def forward(self, input_ids, attention_mask, decoder_input_ids) -> SimpleNamespace:
        """Log-probs (B, 1, V) as logits: log p(eos) is -4.0 or -2.0, the rest spread evenly."""
        vocab = len(self.tokenizer)
        eos = self.tokenizer.eos_token_id
        rows = []
        for found in self._found(input_ids, attention_mask):
            p_eos = math.exp(-4.0 if found else -2.0)
            probs = torch.full((vocab,), (1 - p_eos) / (vocab - 1), dtype=torch.float64)
            probs[eos] = p_eos
            rows.append(probs.log())
        return SimpleNamespace(logits=torch.stack(rows)[:, None, :])


def _third_window_example(tokenizer) -> QAExample:
    """A long context whose answer sentence lies entirely inside window 2 only (of >= 4 windows)."""
    question = "What is the secret code of the old harbour?"
    filler = [f"Sentence number {k} tells nothing about the harbour." for k in range(60)]
    answer = "Zanzibar"
    for k in range(len(filler)):
        context = " ".join(filler[:k] + [f"The secret code of the old harbour is {answer}."] + filler[k:])
        example = QAExample(
            id="long",
            title="t",
            context=context,
            question=question,
            answers=[answer],
            answer_starts=[context.index(answer)],
        )
        targets = [w.target for w in seq2seq_eval_windows([example], tokenizer, MAX_SEQ, LONG_STRIDE)]
        if len(targets) >= 4 and targets[:3] == ["", "", answer] and not any(targets[3:]):
            return example
    raise AssertionError("no placement puts the answer only in the third window")


def test_answer_only_in_third_window_is_found_and_every_window_keeps_the_question():
    texts = [
        " ".join(f"Sentence number {k} tells nothing about the harbour." for k in range(60)),
        "question: What is the secret code of the old harbour? context: The secret code of the old harbour "
        "is Zanzibar.",
    ]
    tokenizer = train_qa_tokenizer(texts, kind="bpe", vocab_size=300)
    example = _third_window_example(tokenizer)
    windows = seq2seq_eval_windows([example], tokenizer, MAX_SEQ, LONG_STRIDE)
    model = _ReadingModel(tokenizer, "Zanzibar")
    predictions, null_odds, _ = Seq2SeqPredictor(
        tokenizer, [example], MAX_SEQ, LONG_STRIDE, batch_size=3, max_answer_tokens=8
    ).predict(model)
    assert predictions == {"long": "Zanzibar"}
    assert null_odds["long"] == pytest.approx(-4.0 + 0.05)  # the lowest "" score, the answering window's
    assert len(model.inputs) == len(windows) >= 4
    prefix = question_prefix(example.question)
    assert all(text.startswith(prefix) for text in model.inputs)
    assert ["Zanzibar" in text for text in model.inputs] == [False, False, True] + [False] * (len(windows) - 3)
    assert all(len(w.input_ids) <= MAX_SEQ for w in windows)


def test_seq2seq_predictor_arguments_are_checked_before_any_tokenizing():
    examples = _overfit_examples()[:1]
    with pytest.raises(ValueError, match=r"^num_beams=0 is invalid: expected a positive integer$"):
        Seq2SeqPredictor(None, examples, MAX_SEQ, STRIDE, num_beams=0)
    with pytest.raises(ValueError, match=r"^max_seq_length=0 is invalid: expected a positive integer$"):
        Seq2SeqPredictor(None, examples, 0, STRIDE)
    with pytest.raises(ValueError, match=r"^null_score_diff_threshold=nan is invalid: expected a finite number$"):
        Seq2SeqPredictor(None, examples, MAX_SEQ, STRIDE, null_score_diff_threshold=math.nan)


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_tokenizer_has_t5_special_ids_and_round_trips(kind):
    examples = _overfit_examples()
    tokenizer = train_qa_tokenizer(qa_training_texts(examples), kind=kind, vocab_size=600)
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    text = examples[0].context[:200]
    ids = tokenizer(text)["input_ids"]
    assert ids[-1] == 1 and 0 not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    model = build_scratch_t5(tokenizer, d_model=32, n_layers=1, n_decoder_layers=1, n_heads=2, d_head=16, d_ff=32)
    assert model.cfg.vocab_size == len(tokenizer)
    assert (model.cfg.pad_token_id, model.cfg.eos_token_id, model.cfg.decoder_start_token_id) == (0, 1, 0)


def _features(n: int = 10) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.arange(n)[:, None].repeat(1, 3), "labels": torch.arange(n)}


def _draw(batches: FeatureBatches, count: int, size: int = 4) -> list[list[int]]:
    return [batches.next_batch(size)["labels"].tolist() for _ in range(count)]


def test_feature_batches_epochs_are_seeded_permutations():
    a, b, c = FeatureBatches(_features(), 1), FeatureBatches(_features(), 1), FeatureBatches(_features(), 2)
    drawn = _draw(a, 5)
    assert drawn == _draw(b, 5) and drawn != _draw(c, 5)
    flat = [i for batch in drawn for i in batch]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    batch = FeatureBatches(_features(), 1).next_batch(4)
    assert torch.equal(batch["input_ids"][:, 0], batch["labels"])  # rows stay aligned across tensors


def test_feature_batches_resume_and_shard():
    full = FeatureBatches(_features(), 3)
    expected = _draw(full, 7)
    first = FeatureBatches(_features(), 3)
    head = _draw(first, 3)
    resumed = FeatureBatches(_features(), 3)
    resumed.load_state_dict(first.state_dict())
    assert head + _draw(resumed, 4) == expected
    ranks = [FeatureBatches(_features(), 3) for _ in range(2)]
    for step in range(7):
        parts = [r.next_batch(4, rank, 2)["labels"].tolist() for rank, r in enumerate(ranks)]
        assert parts[0] + parts[1] == expected[step]
    with pytest.raises(ValueError, match="seed"):
        FeatureBatches(_features(), 4).load_state_dict(full.state_dict())
    with pytest.raises(ValueError, match="rows"):
        FeatureBatches(_features(12), 3).load_state_dict(full.state_dict())
    with pytest.raises(ValueError, match="same number of rows"):
        FeatureBatches({"a": torch.zeros(3), "b": torch.zeros(4)}, 0)


@pytest.mark.parametrize(
    "answer, context, expected",
    [
        ("u. s. army", "Troops of the U.S. Army's first corps", "U.S. Army"),
        ("1, 000", "about 1,000 men", "1,000"),
        ("cafe de flore", "at the Café de Flore in Paris", "Café de Flore"),
        ("Paris", "at the Café de Flore in Paris", "Paris"),
        ("london", "at the Café de Flore in Paris", "london"),
        ("", "anything", ""),
    ],
)
def test_match_in_context_recovers_the_context_text(answer, context, expected):
    """An uncased WordPiece decoding differs from the context in case, accents and spaces only."""
    assert match_in_context(answer, context) == expected


def test_bert2bert_ids_start_with_cls_and_end_with_sep(tmp_path):
    """A BERT tokenizer has no eos: [SEP] ends the labels, [CLS] starts the decoder inputs, never a label."""
    bert = save_tiny_bert(tmp_path / "bert")
    tokenizer = pf.load_tokenizer(bert)
    assert tokenizer.eos_token_id is None
    ids = bert2bert_token_ids(tokenizer)
    assert (
        ids
        == {
            "decoder_start_token_id": tokenizer.cls_token_id,
            "eos_token_id": tokenizer.sep_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        }
        == {"decoder_start_token_id": 101, "eos_token_id": 102, "pad_token_id": 0}
    )
    model = pf.hf.bert2bert_from_pretrained(bert, **ids)
    labels = target_labels(["Norman", ""], tokenizer, 4, end_token_id(model.cfg))
    assert labels.tolist() == [[tokenizer.convert_tokens_to_ids("norman"), 102, -100, -100], [102, -100, -100, -100]]
    assert model.shift_right(labels).tolist() == [[101, labels[0, 0].item(), 102, 0], [101, 102, 0, 0]]
    with pytest.raises(ValueError, match="decoder_start_token_id, eos_token_id"):
        bert2bert_token_ids(train_qa_tokenizer(["a small text"], kind="bpe", vocab_size=40))
