"""`generate(..., return_scores=True)` equals Hugging Face's sequence scores (transformers 4.57.6).

Greedy: the sum of `compute_transition_scores(..., normalize_logits=True)` over the
generated tokens up to and including the eos. Beam search: `sequences_scores`.
The tiny random models and batches are those of test_generation_hf.py.
"""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from test_generation_hf import NEW, PAD, _batch, _hf_model


@pytest.fixture(scope="module", params=["t5", "llama"])
def pair(request, tmp_path_factory):
    """(HF model, posformer model with the same weights, batch, an eos id the model emits early)."""
    family = request.param
    hf = _hf_model(family).eval()
    directory = tmp_path_factory.mktemp(family)
    hf.save_pretrained(directory, safe_serialization=True)
    batch = _batch(family)
    with torch.no_grad():
        free = hf.generate(**batch, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=PAD)
    return hf, pf.from_hf(directory), batch, int(free[0, -NEW + 2])


def _until_eos(new_tokens: torch.Tensor, eos: int) -> torch.Tensor:
    """(B, n) bool: the generated tokens up to and including each row's first eos."""
    is_eos = (new_tokens == eos).long()
    return (is_eos.cumsum(1) - is_eos) == 0


def test_greedy_scores_equal_hf_transition_scores(pair):
    hf, ours, batch, eos = pair
    tokens, scores = ours.generate(**batch, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=PAD, return_scores=True)
    with torch.no_grad():
        out = hf.generate(
            **batch,
            do_sample=False,
            max_new_tokens=NEW,
            eos_token_id=eos,
            pad_token_id=PAD,
            output_scores=True,
            return_dict_in_generate=True,
        )
    assert torch.equal(tokens, out.sequences)
    steps = hf.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    new = out.sequences[:, -steps.shape[1] :]
    expected = steps.masked_fill(~_until_eos(new, eos), 0.0).sum(1)
    assert scores.shape == (batch["input_ids"].shape[0],) and scores.dtype == torch.float32
    assert (new == eos).any(1).any(), "no row ended early: the masking after eos is not exercised"
    torch.testing.assert_close(scores, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("beams,length_penalty,returned", [(3, 1.0, 2), (4, 2.0, 4), (2, 0.0, 1)])
def test_beam_scores_equal_hf_sequences_scores(pair, beams, length_penalty, returned):
    hf, ours, batch, eos = pair
    options = dict(
        num_beams=beams,
        length_penalty=length_penalty,
        num_return_sequences=returned,
        eos_token_id=eos,
        pad_token_id=PAD,
        max_new_tokens=NEW,
    )
    tokens, scores = ours.generate(**batch, return_scores=True, **options)
    with torch.no_grad():
        out = hf.generate(**batch, do_sample=False, output_scores=True, return_dict_in_generate=True, **options)
    assert torch.equal(tokens, out.sequences)
    assert scores.shape == (batch["input_ids"].shape[0] * returned,)
    torch.testing.assert_close(scores, out.sequences_scores, rtol=1e-4, atol=1e-4)


def test_scores_are_opt_in_and_zero_without_new_tokens(pair):
    _, ours, batch, _ = pair
    assert isinstance(ours.generate(**batch, max_new_tokens=2), torch.Tensor)
    tokens, scores = ours.generate(**batch, max_new_tokens=0, num_beams=2, num_return_sequences=2, return_scores=True)
    assert scores.shape == (tokens.shape[0],) and not scores.any()


@pytest.mark.parametrize("beams", [1, 3])
def test_min_new_tokens_equals_hf(pair, beams):
    """No eos before min_new_tokens: HF's tokens; beam scores are HF's (log_softmax, then eos masked)."""
    hf, ours, batch, eos = pair
    options = dict(num_beams=beams, eos_token_id=eos, pad_token_id=PAD, max_new_tokens=NEW, min_new_tokens=4)
    tokens, scores = ours.generate(**batch, return_scores=True, **options)
    with torch.no_grad():
        out = hf.generate(**batch, do_sample=False, output_scores=True, return_dict_in_generate=True, **options)
    assert torch.equal(tokens, out.sequences)
    new = tokens[:, -NEW:]
    assert not (new[:, :4] == eos).any()
    unforced = ours.generate(**batch, num_beams=beams, eos_token_id=eos, pad_token_id=PAD, max_new_tokens=NEW)
    assert (unforced[:, -NEW:][:, :4] == eos).any(), "eos never came early: min_new_tokens is not exercised"
    if beams > 1:
        torch.testing.assert_close(scores, out.sequences_scores, rtol=1e-4, atol=1e-4)
    else:
        with torch.no_grad():
            logits = hf(**batch, decoder_input_ids=tokens[:, :-1]).logits if hf.config.is_encoder_decoder else None
        if logits is not None:  # the greedy score is the unmasked log-prob of the chosen tokens up to the eos
            chosen = torch.log_softmax(logits.float(), -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
            expected = chosen.masked_fill(~_until_eos(tokens[:, 1:], eos), 0.0).sum(1)
            torch.testing.assert_close(scores, expected, rtol=1e-4, atol=1e-4)


def test_min_new_tokens_is_checked(pair):
    _, ours, batch, eos = pair
    with pytest.raises(ValueError, match="min_new_tokens"):
        ours.generate(**batch, min_new_tokens=-1)
