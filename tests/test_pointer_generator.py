"""The pointer-generator (`Config.pointer_generator`): each property that defines it, for random inputs.

- the mixture is a distribution; a gate shut to copying gives the LM head's own distribution, a gate open to it
  gives the copy attention summed per source token (counted here by a loop over the source);
- no probability is copied from padding;
- the follow weight moves the copy attention to the position after the token just written;
- step-by-step decoding over the KV cache gives the logits of the teacher-forced forward;
- the loss alone equals the loss from the logits; the weights survive save_pretrained / from_pretrained;
- a model of another head, and `to_hf`, refuse it by name.
"""

from __future__ import annotations

import pytest
import torch

from posformer.config import Config
from posformer.hf import to_hf
from posformer.hf.family import UnsupportedCheckpoint
from posformer.model import Transformer

VOCAB, START = 40, 0


def copying_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    fields = dict(
        vocab_size=VOCAB,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=64,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=START,
        pointer_generator=True,
        hf_model_type="t5",
    )
    return Transformer(Config.preset("t5", **{**fields, **overrides})).eval()


def source_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 9 distinct source tokens in [3, VOCAB), the second padded after 6."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(VOCAB - 3, generator=generator)[:9] + 3 for _ in range(2)])
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return ids, mask


def set_gate(model: Transformer, bias: float) -> None:
    with torch.no_grad():
        model.pointer_generator.gate.weight.zero_()
        model.pointer_generator.gate.bias.fill_(bias)


def test_the_mixture_is_a_distribution() -> None:
    model = copying_model()
    source, mask = source_batch()
    decoder_ids = torch.randint(0, VOCAB, (2, 5))
    logits = model(source, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    torch.testing.assert_close(logits.exp().sum(-1), torch.ones(2, 5), rtol=0, atol=1e-5)


def test_a_gate_shut_to_copying_gives_the_lm_heads_distribution() -> None:
    model = copying_model()
    set_gate(model, 60.0)
    source, mask = source_batch()
    decoder_ids = torch.randint(0, VOCAB, (2, 5))
    out = model(source, attention_mask=mask, decoder_input_ids=decoder_ids)
    expected = torch.log_softmax(model.head(out.last_hidden_state), dim=-1)
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-5)


def copy_distribution(model: Transformer, source, mask, decoder_ids) -> torch.Tensor:
    """The copy attention of the last hidden states summed per token by a loop over the source: (B, T, V)."""
    pg = model.pointer_generator
    out = model(source, attention_mask=mask, decoder_input_ids=decoder_ids)
    hidden, memory = out.last_hidden_state, out.encoder_last_hidden_state
    expected = torch.zeros(*decoder_ids.shape, VOCAB)
    for b in range(source.shape[0]):
        for t in range(decoder_ids.shape[1]):
            scores = []
            for j in range(source.shape[1]):
                follows = j > 0 and decoder_ids[b, t] != START and source[b, j - 1] == decoder_ids[b, t]
                score = pg.query(hidden[b, t]) @ pg.key(memory[b, j])
                scores.append(score + pg.follow * float(follows) if mask[b, j] else torch.tensor(float("-inf")))
            weights = torch.softmax(torch.stack(scores), dim=0)
            for j in range(source.shape[1]):
                expected[b, t, source[b, j]] += weights[j]
    return expected


@pytest.mark.parametrize("follow", [0.0, 3.0])
def test_a_gate_open_to_copying_gives_the_copy_attention_per_token(follow: float) -> None:
    model = copying_model()
    set_gate(model, -60.0)
    with torch.no_grad():
        model.pointer_generator.follow.fill_(follow)
    source, mask = source_batch()
    decoder_ids = torch.cat((torch.full((2, 1), START), source[:, 2:6]), dim=1)  # tokens that occur in the source
    with torch.no_grad():
        logits = model(source, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        expected = copy_distribution(model, source, mask, decoder_ids)
    torch.testing.assert_close(logits.exp(), expected, rtol=0, atol=1e-5)


def test_nothing_is_copied_from_padding() -> None:
    model = copying_model()
    set_gate(model, -60.0)
    source, mask = source_batch()
    decoder_ids = torch.randint(0, VOCAB, (2, 4))
    with torch.no_grad():
        probs = model(source, attention_mask=mask, decoder_input_ids=decoder_ids).logits.exp()
    padded_only = source[1, 6:]
    assert float(probs[1][:, padded_only].max()) < 1e-6
    torch.testing.assert_close(probs[1][:, source[1, :6]].sum(-1), torch.ones(4), rtol=0, atol=1e-5)


def test_the_follow_weight_continues_a_copied_span() -> None:
    model = copying_model()
    set_gate(model, -60.0)
    with torch.no_grad():
        model.pointer_generator.follow.fill_(50.0)
    source, mask = source_batch()
    written = source[:, 1:5]  # a span of each row
    decoder_ids = torch.cat((torch.full((2, 1), START), written), dim=1)
    predicted = model(source, attention_mask=mask, decoder_input_ids=decoder_ids).logits.argmax(-1)
    assert torch.equal(predicted[:, 1:], source[:, 2:6])


def test_decoding_over_the_cache_gives_the_teacher_forced_logits() -> None:
    model = copying_model()
    with torch.no_grad():
        model.pointer_generator.follow.fill_(2.0)
    source, mask = source_batch()
    decoder_ids = torch.cat((torch.full((2, 1), START), source[:, 3:7]), dim=1)
    with torch.no_grad():
        expected = model(source, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        cache, steps = model.new_cache(), []
        for t in range(decoder_ids.shape[1]):
            out = model(
                source,
                attention_mask=mask,
                decoder_input_ids=decoder_ids[:, t : t + 1],
                decoder_position_ids=torch.full((2, 1), t),
                cache=cache,
            )
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, rtol=0, atol=1e-5)


def test_a_greedy_answers_score_is_its_teacher_forced_log_probability() -> None:
    model = copying_model()
    source, mask = source_batch()
    with torch.no_grad():
        tokens, scores = model.generate(source, attention_mask=mask, max_new_tokens=6, return_scores=True)
        logits = model(source, attention_mask=mask, decoder_input_ids=tokens).logits
    step_scores = logits[:, :-1].gather(-1, tokens[:, 1:, None]).squeeze(-1)
    is_end = (tokens[:, 1:] == 1).long()
    before_end = is_end.cumsum(1) - is_end == 0  # every token up to and with the first end token
    torch.testing.assert_close(scores, (step_scores * before_end).sum(1), rtol=0, atol=1e-4)


def test_the_loss_alone_equals_the_loss_of_the_logits() -> None:
    model = copying_model()
    source, mask = source_batch()
    labels = torch.randint(2, VOCAB, (2, 5))
    labels[0, 3:] = -100
    full = model(source, attention_mask=mask, labels=labels)
    alone = model(source, attention_mask=mask, labels=labels, return_logits=False)
    assert alone.logits is None
    torch.testing.assert_close(alone.loss, full.loss, rtol=0, atol=1e-6)
    picked = full.logits.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    torch.testing.assert_close(full.loss, -picked[labels != -100].mean(), rtol=0, atol=1e-6)


def test_save_pretrained_keeps_the_copying_weights(tmp_path) -> None:
    model = copying_model()
    with torch.no_grad():
        model.pointer_generator.follow.fill_(1.5)
    model.save_pretrained(tmp_path)
    loaded = Transformer.from_pretrained(tmp_path).eval()
    source, mask = source_batch()
    decoder_ids = torch.randint(0, VOCAB, (2, 4))
    with torch.no_grad():
        expected = model(source, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        got = loaded(source, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_another_head_refuses_it_by_name() -> None:
    with pytest.raises(ValueError, match=r"Config.pointer_generator=True is invalid: expected False with head"):
        Config.preset("gpt2", pointer_generator=True)


def test_to_hf_refuses_it_by_name(tmp_path) -> None:
    with pytest.raises(UnsupportedCheckpoint, match=r"Config.pointer_generator=True: t5 has no such setting"):
        to_hf(copying_model(), tmp_path)
