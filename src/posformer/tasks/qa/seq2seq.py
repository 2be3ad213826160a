"""Generative (T5-style) SQuAD v2 question answering: tokenizer, scratch model, batches, prediction.

Models: a T5 checkpoint, a BERT2BERT encoder-decoder warm-started from a BERT checkpoint
(`bert2bert_token_ids` gives its special ids: decoder start [CLS], end [SEP], pad [PAD], as
Hugging Face's BERT2BERT recipes set them), or a small `t5`-preset model from scratch with a
tokenizer trained on the training texts. Targets are the answer text then the model's end token
(`Config.eos_token_id`); "" is the end token alone.

Training rows are the doc_stride windows of `posformer.tasks.qa.windows`: the window
holding the first gold answer is trained on its text, every other window (and every
window of an unanswerable question) on "". Prediction scores two sequences in every window
of an example: "" (the lone eos; its score is log p(eos) at the first step) and the best
non-empty answer (generated with the eos barred from the first step, `min_new_tokens=1`).
`select_seq2seq_answer` keeps the best-scoring non-empty answer across the windows unless the lowest ""
score over the windows (run_qa.py's minimum null score) is within `null_score_diff_threshold` of it. The
score of an answer is
`generate(..., return_scores=True)`'s: the unmasked log-prob sum up to the eos for greedy
decoding, the length-penalized beam score for beam search (where "" has length 1).
Scoring "" in every window, rather than only where greedy decoding emits it, is what makes
the null odds a real margin: best_f1 and its threshold then mean something even for a
model whose greedy output is "" everywhere.

`max_answer_tokens` counts answer tokens without the end-of-sequence token: targets are
cut to max_answer_tokens + 1 tokens with the eos, and generation runs for as many.
Answers are decoded without special tokens; `match_in_context` then maps each one to the text of
its window that it spells (an uncased BERT tokenizer decodes "U.S." as "u. s.").
"""

from __future__ import annotations

import math
import unicodedata
from collections import defaultdict
from typing import Any, Iterable, Sequence

import torch
from torch import Tensor

from posformer.config import Config
from posformer.data.stable_unigram import canonical_unigram
from posformer.model import Transformer
from posformer.tasks.qa.null_answers import encoder_span_scores
from posformer.tasks.qa.options import NULL_SCORES
from posformer.tasks.qa.predictor import QAPredictions, check_windows
from posformer.tasks.qa.windows import (
    QAExampleLike,
    kept_answer,
    pad_windows,
    question_prefix,
    select_seq2seq_answer,
    seq2seq_eval_windows,
    seq2seq_training_features,
)
from posformer.utils.validation import check_choice, check_int, check_number, check_token_in_vocabulary

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
TOKENIZER_KINDS = ("unigram", "bpe")


def qa_training_texts(examples: Iterable[QAExampleLike]) -> list[str]:
    """The texts a scratch tokenizer learns from: each distinct context once, every question in its
    encoder-input frame ("question: {q} context:", so the frame's words and colons are in the vocabulary)
    and every answer."""
    contexts: dict[str, None] = {}
    texts = []
    for example in examples:
        contexts.setdefault(example.context, None)
        texts.append(question_prefix(example.question))
        texts.extend(example.answers)
    return list(contexts) + texts


def train_qa_tokenizer(texts: Iterable[str], kind: str = "unigram", vocab_size: int = 8000):
    """A `PreTrainedTokenizerFast` trained by `tokenizers` on `texts`, with T5's special-token ids.

    <pad> = 0, </s> = 1, <unk> = 2 (the `t5` preset's pad 0, eos 1 and decoder start 0);
    every encoding ends with </s>. kind: "unigram" (SentencePiece-like, as T5) or "bpe";
    both split on whitespace with the "▁" metaspace, so decoding restores the spaces. The same texts give
    the same tokenizer in every process (Unigram: `stable_unigram.canonical_unigram`).
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"tokenizer kind must be one of {', '.join(TOKENIZER_KINDS)}, got {kind!r}")
    specials = [PAD, EOS, UNK]
    if kind == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=specials, unk_token=UNK, show_progress=False
        )
    else:
        tokenizer = Tokenizer(models.BPE(unk_token=UNK))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    try:
        tokenizer.train_from_iterator(list(texts), trainer=trainer)
    except Exception as err:  # the Rust trainer raises a bare Exception, e.g. for a vocabulary below the alphabet
        raise ValueError(
            f"--vocab-size={vocab_size} with --tokenizer {kind}: the tokenizer trainer failed: {err}; "
            "raise --vocab-size"
        ) from err
    if kind == "unigram":  # the trainer's output depends on hash order: make it the same in every process
        tokenizer = canonical_unigram(tokenizer, len(specials))
    ids = [tokenizer.token_to_id(t) for t in specials]
    if ids != [0, 1, 2]:
        raise RuntimeError(f"the trained tokenizer put {specials} at ids {ids}, expected [0, 1, 2]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="right",
        model_input_names=["input_ids", "attention_mask"],
    )


def build_scratch_t5(tokenizer, **overrides: Any) -> Transformer:
    """A freshly initialised `t5`-preset model (T5's own init, `Config.init="t5"`) whose vocabulary and
    special ids fit `tokenizer`.

    overrides: any `Config` fields (d_model, n_layers, dropout, ...) on top of the preset.
    """
    fields: dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    fields.update(overrides)
    return Transformer(Config.preset("t5", **fields))


def bert2bert_token_ids(tokenizer) -> dict[str, int]:
    """The special ids of a BERT2BERT model for a BERT tokenizer, which has no eos token: decoder start
    [CLS], end [SEP], pad [PAD] (as `EncoderDecoderModel` BERT2BERT recipes set them)."""
    ids = {
        "decoder_start_token_id": tokenizer.cls_token_id,
        "eos_token_id": tokenizer.sep_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    missing = [name for name, value in ids.items() if value is None]
    if missing:
        raise ValueError(
            f"a BERT2BERT model needs a tokenizer with [CLS], [SEP] and [PAD] tokens; this one "
            f"has none for {', '.join(missing)}"
        )
    return ids


def end_token_id(cfg: Config) -> int:
    """The token that ends every answer: `Config.eos_token_id`, which must be a token id."""
    check_token_in_vocabulary(
        "Config.eos_token_id", cfg.eos_token_id, cfg.vocab_size, 'the seq2seq QA job ends every answer (and "") with it'
    )
    return cfg.eos_token_id


def seq2seq_train_tensors(
    examples: Sequence[QAExampleLike],
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_answer_tokens: int,
    end_token: int,
    span_positions: bool = False,
) -> dict[str, Tensor]:
    """The training windows of `examples`, one row per window, ready for `FeatureBatches`: input_ids,
    attention_mask (N, max_seq_length) and labels (N, max_answer_tokens + 1): the answer's tokens,
    `end_token`, -100s; with `span_positions` the answer's start and end token (N,) for the encoder's span loss."""
    return seq2seq_training_features(
        examples, tokenizer, max_seq_length, doc_stride, max_answer_tokens + 1, end_token, span_positions
    )


def _fold(text: str) -> str:
    """`text` lower-cased, without accents and whitespace: what an uncased tokenizer's decoding keeps."""
    return "".join(
        c for c in unicodedata.normalize("NFD", text.lower()) if not c.isspace() and not unicodedata.combining(c)
    )


def match_in_context(answer: str, context: str) -> str:
    """The first substring of `context` that spells `answer` up to case, accents and whitespace, else
    `answer` as it is. E.g. ("u. s. army", "the U.S. Army's") -> "U.S. Army"."""
    if not answer or answer in context:
        return answer
    target = _fold(answer)
    folded, origin = [], []  # origin[k]: the context index of folded character k
    for index, char in enumerate(context):
        for piece in _fold(char):
            folded.append(piece)
            origin.append(index)
    start = "".join(folded).find(target)
    if not target or start < 0:
        return answer
    return context[origin[start] : origin[start + len(target) - 1] + 1]


class Seq2SeqPredictor:
    """Answers every example from all its windows with an encoder-decoder model (see the module doc).

    The eval windows (`seq2seq_eval_windows`) are built once, here, and sorted longest first.
    `predict` sends them through the model in batches of `batch_size`, right-padded (input_ids, attention_mask:
    (b, longest window)); each window gives two candidates of its example: ("", log p(eos | window)) and (its
    best non-empty generation of at most max_answer_tokens tokens, greedy or `num_beams` beams,
    with its score); `select_seq2seq_answer` picks across the windows. The model's
    `Config.eos_token_id` ends the answers and `Config.pad_token_id` fills after it.

    `null_score` says what decides "no answer" (the answer is always the decoder's): "decoder" (the "" scores
    against the best answer's), "encoder-span" (the encoder's span head of `Config.encoder_span_loss`: the lowest
    null score of the windows against the best span score, `encoder_span_scores`) or "both" (the two null odds
    added).
    """

    def __init__(
        self,
        tokenizer,
        examples: Sequence[QAExampleLike],
        max_seq_length: int,
        doc_stride: int,
        *,
        batch_size: int = 32,
        num_beams: int = 1,
        max_answer_tokens: int = 30,
        null_score_diff_threshold: float = 0.0,
        length_penalty: float = 1.0,
        null_score: str = "decoder",
    ) -> None:
        check_windows(examples, max_seq_length, doc_stride)
        for name, value in (
            ("batch_size", batch_size),
            ("num_beams", num_beams),
            ("max_answer_tokens", max_answer_tokens),
        ):
            check_int(name, value)
        check_number("null_score_diff_threshold", null_score_diff_threshold)
        check_number("length_penalty", length_penalty)
        check_choice("null_score", null_score, NULL_SCORES)
        self.null_score = null_score
        self.tokenizer, self.examples = tokenizer, list(examples)
        self.batch_size, self.num_beams, self.max_answer_tokens = batch_size, num_beams, max_answer_tokens
        self.null_score_diff_threshold, self.length_penalty = null_score_diff_threshold, length_penalty
        windows = seq2seq_eval_windows(self.examples, tokenizer, max_seq_length, doc_stride)
        self.windows = sorted(windows, key=lambda w: -len(w.input_ids))  # batches of similar length
        self.logits_dtype: str | None = None

    @torch.no_grad()
    def predict(self, model: Transformer) -> QAPredictions:
        """(predictions, null odds, best non-empty answers) id -> value; null odds are the lowest "" score
        minus the best answer score, +-inf when one kind is missing. See `QAPredictions`."""
        tokenizer = self.tokenizer
        end = end_token_id(model.cfg)
        if self.null_score != "decoder" and getattr(model, "encoder_span", None) is None:
            raise ValueError(
                f"--null-score {self.null_score} needs the encoder's span head, and this model has none: train it "
                "with --encoder-span-loss, or predict with --null-score decoder"
            )
        contexts = {example.id: example.context for example in self.examples}
        candidates: dict[str, list[tuple[str, float]]] = defaultdict(list)
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)  # encoder span head: (null, best span)
        device = next(model.parameters()).device
        for first in range(0, len(self.windows), self.batch_size):
            chunk = self.windows[first : first + self.batch_size]
            batch = {k: v.to(device) for k, v in pad_windows(chunk, tokenizer.pad_token_id).items()}
            tokens, scores = model.generate(
                **batch,
                max_new_tokens=self.max_answer_tokens + 1,
                num_beams=self.num_beams,
                length_penalty=self.length_penalty,
                eos_token_id=end,
                pad_token_id=model.cfg.pad_token_id,
                return_scores=True,
                min_new_tokens=1,
            )
            out = model(**batch, decoder_input_ids=tokens[:, :1])
            null_scores = torch.log_softmax(out.logits[:, 0].float(), dim=-1)[:, end]
            self.logits_dtype = str(out.logits.dtype).removeprefix("torch.")
            if self.null_score != "decoder":
                span_null, span_best = encoder_span_scores(
                    *model.encoder_span(out.encoder_last_hidden_state),
                    [w.context_tokens for w in chunk],
                    self.max_answer_tokens,
                )
                for window, pair in zip(chunk, zip(span_null.tolist(), span_best.tolist())):
                    spans[window.example_id].append(pair)
            texts = tokenizer.batch_decode(
                tokens[:, 1:].cpu(), skip_special_tokens=True, clean_up_tokenization_spaces=True
            )
            for window, text, score, null in zip(chunk, texts, scores.tolist(), null_scores.tolist()):
                start, stop = window.char_span
                text = match_in_context(text.strip(), contexts[window.example_id][start:stop])
                candidates[window.example_id] += [("", null), (text, score)]
        predictions, null_odds, answers = {}, {}, {}
        for example in self.examples:
            answer, odds = select_seq2seq_answer(candidates[example.id], -math.inf)
            if self.null_score != "decoder" and answer:
                span_odds = min(n for n, _ in spans[example.id]) - max(b for _, b in spans[example.id])
                odds = span_odds if self.null_score == "encoder-span" else odds + span_odds
                odds = math.inf if math.isnan(odds) else odds  # no context token and no "" window: no answer
            answers[example.id], null_odds[example.id] = answer, odds
            predictions[example.id] = kept_answer(answer, odds, self.null_score_diff_threshold)
        return QAPredictions(predictions, null_odds, answers)
