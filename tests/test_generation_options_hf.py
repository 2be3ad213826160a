"""Each option of `generate` gives Hugging Face's tokens, greedy and beam search alike (transformers 4.57.6 and 5.x):
repetition_penalty, no_repeat_ngram_size, min_length / max_length, a list of eos ids, stop_strings (read with a
tokenizer, with and without eos ids), a streamer (the same put() calls; TextStreamer's text) and
return_dict_in_generate with output_scores / output_logits (scores, logits, sequences_scores, beam_indices).

The tiny random models and batches are those of test_generation_hf.py: a Llama (left-padded prompts: the options
read the pads too, as transformers does) and a T5 (they read the decoder's tokens, its start token first). Each
option is also shown to change the tokens, so that the comparison exercises it.
"""

from __future__ import annotations

import pytest
import torch
import transformers

import posformer as pf
from hf_oracle import TRANSFORMERS_5
from test_generation_hf import NEW, PAD, VOCAB, _batch, _hf_model

SEARCHES = {"greedy": {}, "beam": {"num_beams": 3, "num_return_sequences": 2}}
TEXT = [
    "the quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat",
    "stop strings end a row once its text ends in one of them, split over tokens or not",
    "a dog ran in the park and then it sat by the river to watch the boats go past",
]


def byte_level_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (GPT-2's kind: "Ġ" marks a space) trained to exactly VOCAB tokens, so every id
    the tiny models generate has a text; ids 0, 1, 2 are <pad>, <s>, </s>, as in the tiny Llama's config."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "<s>", "</s>"])
    tokenizer.train_from_iterator(TEXT * 5, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    assert len(fast) == VOCAB
    return fast


@pytest.fixture(scope="module")
def tokenizer() -> transformers.PreTrainedTokenizerFast:
    return byte_level_tokenizer()


@pytest.fixture(scope="module", params=["llama", "t5"])
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


def _both(pair, **options) -> tuple[torch.Tensor, torch.Tensor]:
    hf, ours, batch, _ = pair
    options = {"max_new_tokens": NEW, "pad_token_id": PAD, **options}
    with torch.no_grad():
        theirs = hf.generate(**batch, do_sample=False, **options)
    return ours.generate(**batch, **options), theirs


def _prefix(pair) -> int:
    """The tokens generation starts from: the prompt (decoder) or the decoder start token (T5)."""
    hf, _, batch, _ = pair
    return 1 if hf.config.is_encoder_decoder else batch["input_ids"].shape[1]


@pytest.mark.parametrize("search", sorted(SEARCHES))
@pytest.mark.parametrize("penalty", [1.5, 0.5])
def test_repetition_penalty_equals_hf(pair, search, penalty):
    """A penalty (1.5) and a reward (0.5); greedy tokens change with either (the scores of beam search are compared
    in test_return_dict_in_generate_equals_hf)."""
    eos = pair[3]
    ours, theirs = _both(pair, repetition_penalty=penalty, eos_token_id=eos, **SEARCHES[search])
    assert torch.equal(ours, theirs), f"\n{ours}\n{theirs}"
    if search == "greedy":
        plain, _ = _both(pair, eos_token_id=eos)
        assert not torch.equal(ours, plain), "the penalty changed nothing: the test does not exercise it"


@pytest.mark.parametrize("search", sorted(SEARCHES))
@pytest.mark.parametrize("size", [1, 2, 3])
def test_no_repeat_ngram_size_equals_hf(pair, search, size):
    ours, theirs = _both(pair, no_repeat_ngram_size=size, eos_token_id=[], **SEARCHES[search])
    assert torch.equal(ours, theirs), f"\n{ours}\n{theirs}"
    if size < 3:
        plain, _ = _both(pair, eos_token_id=[], **SEARCHES[search])
        assert not torch.equal(ours, plain), "no n-gram was banned: the test does not exercise the option"


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_min_length_and_max_length_equal_hf(pair, search):
    """HF's total lengths: the prefix counts (the prompt, or T5's start token)."""
    hf, ours, batch, eos = pair
    lengths = dict(min_length=_prefix(pair) + 4, max_length=_prefix(pair) + 7)
    options = dict(eos_token_id=eos, pad_token_id=PAD, **lengths, **SEARCHES[search])
    with torch.no_grad():
        theirs = hf.generate(**batch, do_sample=False, **options)
    assert torch.equal(ours.generate(**batch, **options), theirs), f"\n{theirs}"
    assert theirs.shape[1] <= _prefix(pair) + 7
    assert not (theirs[:, _prefix(pair) :][:, :4] == eos).any()
    free, _ = _both(pair, eos_token_id=eos, **SEARCHES[search])
    assert (free[:, _prefix(pair) :][:, :4] == eos).any(), "eos never came early: min_length is not exercised"


def test_greedy_with_two_eos_ids_equals_hf(pair):
    """The first eos id is the third token of row 0, the second the first token of another row: each ends a row."""
    hf, ours, batch, eos = pair
    free, _ = _both(pair, eos_token_id=[])
    second = next(int(t) for t in free[1:, _prefix(pair)] if int(t) not in (eos, PAD))
    ours_tokens, theirs = _both(pair, eos_token_id=[eos, second])
    assert torch.equal(ours_tokens, theirs), f"\n{ours_tokens}\n{theirs}"
    ends = [row[(row == eos) | (row == second)] for row in theirs[:, _prefix(pair) :]]
    ended = {int(end[0]) for end in ends if len(end)}
    assert ended == {eos, second}, f"not every eos id ended a row: {ended}"


def _stop_string(pair, tokenizer, eos: list[int], **options) -> str:
    """A string that ends inside the 2nd token of the first row that generates two tokens before any eos (with
    `options`), its first character from the 1st token's text."""
    free, _ = _both(pair, eos_token_id=eos, **options)
    new = free[:, _prefix(pair) : _prefix(pair) + 2]
    row = next(r for r in new if not any(int(t) in eos for t in r))
    first, second = (tokenizer.decode([int(t)]) for t in row)
    return first[-1:] + second[:2]


@pytest.mark.parametrize("with_eos", [True, False], ids=["eos", "no-eos"])
@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_stop_strings_equal_hf(pair, tokenizer, search, with_eos):
    """With eos ids or without (an empty list), a row that met a stop string is padded after it."""
    if pair[0].config.is_encoder_decoder and not TRANSFORMERS_5:
        pytest.skip("transformers 4.57.6 hands generate's tokenizer to T5's forward (a TypeError); 5.x does not")
    eos = [pair[3]] if with_eos else []
    stop = _stop_string(pair, tokenizer, eos, **SEARCHES[search])
    options = dict(eos_token_id=eos, **SEARCHES[search])
    ours, theirs = _both(pair, stop_strings=[stop, "never in the text"], tokenizer=tokenizer, **options)
    assert torch.equal(ours, theirs), f"{stop!r}\n{ours}\n{theirs}"
    plain, _ = _both(pair, **options)
    assert not torch.equal(ours, plain), f"the stop string {stop!r} stopped nothing"


def test_one_stop_string_needs_a_tokenizer(pair):
    _, ours, batch, _ = pair
    with pytest.raises(ValueError, match="stop_strings needs the model's tokenizer"):
        ours.generate(**batch, max_new_tokens=2, stop_strings="x")


class RecordingStreamer:
    """transformers' BaseStreamer: put(token_ids) and end(); records every call."""

    def __init__(self) -> None:
        self.calls: list[torch.Tensor | str] = []

    def put(self, value: torch.Tensor) -> None:
        self.calls.append(value.clone())

    def end(self) -> None:
        self.calls.append("end")


def test_streamer_gets_hfs_tokens_in_hfs_order(pair):
    hf, ours, batch, eos = pair
    theirs, mine = RecordingStreamer(), RecordingStreamer()
    with torch.no_grad():
        hf.generate(**batch, do_sample=False, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=PAD, streamer=theirs)
    ours.generate(**batch, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=PAD, streamer=mine)
    assert len(mine.calls) == len(theirs.calls) > 3 and mine.calls[-1] == theirs.calls[-1] == "end"
    for got, expected in zip(mine.calls[:-1], theirs.calls[:-1]):
        assert torch.equal(got, expected), f"\n{got}\n{expected}"


def test_text_streamer_prints_hfs_text(pair, tokenizer, capsys):
    hf, ours, batch, _ = pair
    one = {name: value[:1] for name, value in batch.items()}  # TextStreamer streams one sequence
    with torch.no_grad():
        hf.generate(**one, do_sample=False, max_new_tokens=NEW, streamer=transformers.TextStreamer(tokenizer))
    theirs = capsys.readouterr().out
    ours.generate(**one, max_new_tokens=NEW, streamer=transformers.TextStreamer(tokenizer))
    assert capsys.readouterr().out == theirs and theirs.strip()


def test_streamer_refuses_beam_search(pair):
    _, ours, batch, _ = pair
    with pytest.raises(ValueError, match="streamer cannot be used with beam search"):
        ours.generate(**batch, max_new_tokens=2, num_beams=2, streamer=RecordingStreamer())


def _close(ours: tuple, theirs: tuple) -> None:
    """Per step: the same tokens banned (-inf), the rest within 1e-4 of the step's largest logit. Float32 rounding
    grows with the values summed: the T5 here (initializer_factor 4, so that rows end early) has logits up to 48,
    and transformers' own float32 logits are 1e-3 from its float64 ones (ours 1.2e-3, the two 6e-4 apart); the
    Llama's stay under 5 (and agree to 4e-6)."""
    assert len(ours) == len(theirs)
    for step, (got, expected) in enumerate(zip(ours, theirs)):
        assert torch.equal(got.isinf(), expected.isinf()), f"step {step}: other tokens banned"
        scale = max(1.0, float(expected[expected.isfinite()].abs().max()))
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 * scale, msg=f"step {step}")


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_return_dict_in_generate_equals_hf(pair, search):
    """Scores after the processors (all three; the repetition penalty where 4.57.6 agrees, see below), the raw
    logits, and for beam search sequences_scores and beam_indices (with which transformers'
    compute_transition_scores reads the scores)."""
    hf, ours, batch, eos = pair
    options = dict(no_repeat_ngram_size=2, min_new_tokens=3, eos_token_id=eos)
    if TRANSFORMERS_5 or hf.config.is_encoder_decoder:
        options["repetition_penalty"] = 1.3
    options.update(return_dict_in_generate=True, output_scores=True, output_logits=True, **SEARCHES[search])
    out, expected = _both(pair, **options)
    assert isinstance(out, pf.generation.GenerateOutput)
    assert torch.equal(out.sequences, expected.sequences), f"\n{out.sequences}\n{expected.sequences}"
    _close(out.scores, expected.scores)
    _close(out.logits, expected.logits)
    if search == "greedy":
        assert out.sequences_scores is None and out.beam_indices is None
        return
    torch.testing.assert_close(out.sequences_scores, expected.sequences_scores, rtol=1e-4, atol=1e-4)
    assert torch.equal(out.beam_indices, expected.beam_indices.long()), f"\n{out.beam_indices}\n{expected.beam_indices}"
    transitions = hf.compute_transition_scores(out.sequences, out.scores, out.beam_indices, normalize_logits=False)
    assert transitions.isfinite().any()


def test_return_dict_without_scores_holds_the_sequences_only(pair):
    out, expected = _both(pair, num_beams=2, return_dict_in_generate=True, eos_token_id=pair[3])
    assert torch.equal(out.sequences, expected.sequences)
    assert out.scores is None and out.logits is None and out.sequences_scores is None is expected.sequences_scores


def test_repetition_penalty_leaves_left_padding_out_as_transformers_5(pair):
    """transformers 5.x leaves a prompt's left padding out of the penalty (its prompt_ignore_length), as posformer
    does: the same scores. 4.57.6 penalizes the pad id too: its scores differ there, in the left-padded rows whose
    real tokens do not hold the pad id, by the penalty, and nowhere else."""
    hf, ours, batch, _ = pair
    penalty, options = 1.3, dict(eos_token_id=[], return_dict_in_generate=True, output_scores=True)
    out, expected = _both(pair, repetition_penalty=penalty, **options)
    assert torch.equal(out.sequences, expected.sequences)
    mask = batch["attention_mask"]
    padded = (mask[:, 0] == 0) & (not hf.config.is_encoder_decoder)
    if TRANSFORMERS_5 or not padded.any():
        _close(out.scores, expected.scores)
        return
    pad, differing = int(batch["input_ids"][padded][0, 0]), 0
    for step, (got, theirs) in enumerate(zip(out.scores, expected.scores)):
        others = torch.ones_like(got, dtype=torch.bool)
        others[padded, pad] = False
        _close((got[others],), (theirs[others],))
        real = torch.cat((mask, torch.ones(mask.shape[0], step, dtype=mask.dtype)), dim=1).bool()
        holds_pad = ((out.sequences[:, : real.shape[1]] == pad) & real).any(1)
        at_pad = got[:, pad]
        penalized = torch.where(at_pad < 0, at_pad * penalty, at_pad / penalty)
        wanted = torch.where(padded & ~holds_pad, penalized, at_pad)
        torch.testing.assert_close(theirs[:, pad], wanted, rtol=1e-4, atol=1e-4, msg=f"step {step}")
        differing += int((padded & ~holds_pad).sum())
    assert differing, "no row where 4.57.6 penalizes the pad alone: the difference is not exercised"


def test_sampling_scores_are_the_warped_ones_and_the_streamer_gets_the_draws(pair):
    """Sampling has no token-for-token oracle; what holds for any draw: each step's scores keep top_k finite entries
    per row (the temperature applied to the processed logits), the drawn token is one of them, and the streamer
    gets the prefix, then exactly the returned tokens."""
    _, ours, batch, _ = pair
    streamer = RecordingStreamer()
    out = ours.generate(
        **batch,
        max_new_tokens=NEW,
        do_sample=True,
        temperature=0.7,
        top_k=5,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(0),
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        streamer=streamer,
    )
    prefix = _prefix(pair)
    assert len(out.scores) == NEW == len(streamer.calls) - 2
    assert torch.equal(streamer.calls[0], out.sequences[:, :prefix])
    for step, (scores, logits) in enumerate(zip(out.scores, out.logits)):
        assert (scores.isfinite().sum(1) == 5).all()
        token = out.sequences[:, prefix + step]
        assert torch.equal(streamer.calls[1 + step], token)
        assert scores.gather(1, token[:, None]).isfinite().all()
        kept = scores.isfinite()
        torch.testing.assert_close(scores[kept], (logits / 0.7)[kept])
