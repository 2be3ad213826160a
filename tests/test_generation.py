"""Generation on posformer-native models: the KV cache changes nothing, sampling is seeded and filtered,
eos and pad behave, arguments are checked."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from tests.conftest import tiny


def _left_padded(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts of lengths 6 and 3, the second left-padded with token 0."""
    ids = torch.randint(1, vocab, (2, 6))
    mask = torch.tensor([[1] * 6, [0] * 3 + [1] * 3])
    return ids.masked_fill(mask == 0, 0), mask


def _recomputed_greedy(model: pf.Transformer, ids: torch.Tensor, mask: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding without a cache: the whole sequence is run again at every step."""
    for _ in range(steps):
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        ids = torch.cat((ids, logits.argmax(-1, keepdim=True)), dim=1)
        mask = torch.cat((mask, torch.ones_like(mask[:, :1])), dim=1)
    return ids


@pytest.mark.parametrize("position", pf.positions.names())
@pytest.mark.parametrize("kv_heads", [2, 1])
def test_cached_greedy_equals_recomputation(position: str, kv_heads: int) -> None:
    """Every registered encoding, GQA and MQA, a left-padded batch, over the preallocated cache."""
    model = pf.Transformer(tiny("decoder", position=position, n_kv_heads=kv_heads)).eval()
    ids, mask = _left_padded(model.cfg.vocab_size)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=7, eos_token_id=[])
    assert torch.equal(out, _recomputed_greedy(model, ids, mask, 7))


def test_encoder_decoder_beam_search_returns_best_first() -> None:
    model = pf.Transformer(tiny("encoder_decoder", position="t5")).eval()
    src = torch.randint(1, model.cfg.vocab_size, (2, 5))
    mask = torch.tensor([[1] * 5, [1] * 3 + [0] * 2])
    out = model.generate(src, attention_mask=mask, max_new_tokens=6, num_beams=3, num_return_sequences=3)
    assert out.shape == (6, 7) and (out[:, 0] == 0).all()
    for row in range(2):  # every hypothesis runs to the end here: the best has the highest log-probability
        tgt = out[3 * row : 3 * row + 3]
        logits = model(
            src[row : row + 1].expand(3, -1),
            attention_mask=mask[row : row + 1].expand(3, -1),
            decoder_input_ids=tgt[:, :-1],
        ).logits
        score = logits.log_softmax(-1).gather(-1, tgt[:, 1:, None]).sum((1, 2))
        assert (score[:-1] >= score[1:] - 1e-5).all()
        greedy = model.generate(src[row : row + 1], attention_mask=mask[row : row + 1], max_new_tokens=6)
        greedy_logits = model(
            src[row : row + 1], attention_mask=mask[row : row + 1], decoder_input_ids=greedy[:, :-1]
        ).logits
        greedy_score = greedy_logits.log_softmax(-1).gather(-1, greedy[:, 1:, None]).sum()
        assert score[0] >= greedy_score - 1e-5


def test_cache_reorder_selects_rows_of_every_part() -> None:
    """Self-attention, cross-attention and the encoder memory all follow `Cache.reorder`."""
    model = pf.Transformer(tiny("encoder_decoder", position="t5")).eval()
    src = torch.randint(1, model.cfg.vocab_size, (2, 5))
    mask = torch.tensor([[1] * 5, [1] * 3 + [0] * 2])
    cache = pf.Cache(model.cfg.decoder_layers)
    model(src, attention_mask=mask, decoder_input_ids=torch.zeros(2, 2, dtype=torch.long), cache=cache)
    before = [(c.k.clone(), c.v.clone(), c.pos.clone()) for c in cache.self_attn]
    before_cross = [(c.k.clone(), c.v.clone()) for c in cache.cross_attn]
    memory, memory_mask = cache.encoder_hidden.clone(), cache.encoder_mask.clone()
    index = torch.tensor([1, 0, 1])
    cache.reorder(index)
    for layer, (k, v, pos) in zip(cache.self_attn, before):
        assert torch.equal(layer.k, k[index]) and torch.equal(layer.v, v[index]) and torch.equal(layer.pos, pos[index])
    for layer, (k, v) in zip(cache.cross_attn, before_cross):
        assert torch.equal(layer.k, k[index]) and torch.equal(layer.v, v[index])
    assert torch.equal(cache.encoder_hidden, memory[index]) and torch.equal(cache.encoder_mask, memory_mask[index])


def test_greedy_pads_rows_after_eos() -> None:
    model = pf.Transformer(tiny("decoder", position="rope")).eval()
    ids, mask = _left_padded(model.cfg.vocab_size)
    free = model.generate(ids, attention_mask=mask, max_new_tokens=8, eos_token_id=[])
    eos = int(free[0, 7])  # the second new token of the first row
    for pad, fill in ((9, 9), (None, eos)):  # pad_token_id, then (Config.pad_token_id is None) the eos id
        out = model.generate(ids, attention_mask=mask, max_new_tokens=8, eos_token_id=eos, pad_token_id=pad)
        for ours, unstopped in zip(out[:, 6:], free[:, 6:]):
            hits = (ours == eos).nonzero()
            end = int(hits[0]) + 1 if len(hits) else len(ours)
            assert torch.equal(ours[:end], unstopped[:end])
            assert (ours[end:] == fill).all()
        assert (out[0, 8:] == fill).all() and out.shape[1] <= free.shape[1]


def test_generate_stops_when_every_row_ended() -> None:
    model = pf.Transformer(tiny("decoder", position="rope")).eval()
    prompt = torch.randint(1, model.cfg.vocab_size, (1, 4))
    first = int(model.generate(prompt, max_new_tokens=1)[0, -1])
    assert model.generate(prompt, max_new_tokens=10, eos_token_id=first).shape == (1, 5)
    beams = model.generate(prompt, max_new_tokens=10, num_beams=2, eos_token_id=[first, 3])
    assert beams.shape[0] == 1 and beams.shape[1] <= 14


def test_seeded_sampling_is_reproducible() -> None:
    model = pf.Transformer(tiny("decoder", position="rope")).eval()
    prompt = torch.randint(1, model.cfg.vocab_size, (2, 4))

    def sample(seed: int) -> torch.Tensor:
        return model.generate(
            prompt,
            max_new_tokens=12,
            do_sample=True,
            temperature=1.5,
            eos_token_id=[],
            generator=torch.Generator().manual_seed(seed),
        )

    assert torch.equal(sample(3), sample(3))
    assert not torch.equal(sample(3), sample(4))


def test_sampling_num_return_sequences_and_top_k_one_is_greedy() -> None:
    model = pf.Transformer(tiny("decoder", position="rope")).eval()
    prompt = torch.randint(1, model.cfg.vocab_size, (2, 4))
    out = model.generate(
        prompt,
        max_new_tokens=5,
        do_sample=True,
        top_k=1,
        num_return_sequences=3,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(0),
    )
    greedy = model.generate(prompt, max_new_tokens=5, eos_token_id=[])
    assert torch.equal(out, greedy.repeat_interleave(3, dim=0))


def _step_logits(model: pf.Transformer, out: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """The logits (B, new, V) that chose each new token of out (B, prompt_len + new), recomputed."""
    return model(out[:, :-1]).logits[:, prompt_len - 1 :]


@pytest.mark.parametrize("top_k", [2, 5])
def test_top_k_samples_only_the_k_best(top_k: int) -> None:
    model = pf.Transformer(tiny("decoder", position="rope", init_std=0.5)).eval()
    prompt = torch.randint(1, model.cfg.vocab_size, (4, 3))
    out = model.generate(
        prompt,
        max_new_tokens=12,
        do_sample=True,
        top_k=top_k,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(1),
    )
    logits = _step_logits(model, out, 3)
    chosen = logits.gather(-1, out[:, 3:, None])
    better = (logits > chosen + 1e-4).sum(-1)
    assert (better < top_k).all()
    assert (better > 0).any(), "top-k sampling never picked anything but the argmax"


@pytest.mark.parametrize("top_p", [0.3, 0.8])
def test_top_p_samples_only_the_nucleus(top_p: float) -> None:
    model = pf.Transformer(tiny("decoder", position="rope", init_std=0.5)).eval()
    prompt = torch.randint(1, model.cfg.vocab_size, (4, 3))
    temperature = 0.7
    out = model.generate(
        prompt,
        max_new_tokens=12,
        do_sample=True,
        top_p=top_p,
        temperature=temperature,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(2),
    )
    probs = (_step_logits(model, out, 3) / temperature).softmax(-1)
    chosen = probs.gather(-1, out[:, 3:, None])
    mass_above = (probs * (probs > chosen + 1e-6)).sum(-1)
    assert (mass_above < top_p + 1e-4).all()


def test_generate_restores_training_mode() -> None:
    model = pf.Transformer(tiny("decoder")).train()
    model.generate(torch.randint(1, 61, (1, 3)), max_new_tokens=2, num_beams=2)
    assert model.training


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(num_beams=0), "num_beams=0 is invalid: expected a positive integer"),
        (dict(num_beams=2, num_return_sequences=3), "num_return_sequences=3 must be <= num_beams=2"),
        (dict(num_beams=2, do_sample=True), "beam sampling"),
        (dict(num_return_sequences=2), "greedy decoding returns one sequence"),
        (dict(num_beams=2, early_stopping="sometimes"), "early_stopping='sometimes' is invalid: expected True, False"),
        (dict(num_beams=2, early_stopping=2), "early_stopping=2 is invalid"),
        (dict(do_sample=True, temperature=0.0), "temperature=0.0 is invalid: expected a number > 0"),
        (dict(do_sample=True, temperature="1"), "temperature='1' is invalid: expected a number > 0"),
        (dict(do_sample=True, temperature=float("inf")), "temperature=inf is invalid"),
        (dict(do_sample=True, top_p=1.5), r"top_p=1.5 is invalid: expected a number in \(0, 1\]"),
        (dict(do_sample=True, top_p=float("nan")), "top_p=nan is invalid"),
        (dict(do_sample=True, top_k=2.5), "top_k=2.5 is invalid"),
        (dict(do_sample="yes"), "do_sample='yes' is invalid: expected True or False"),
        (dict(return_scores=1), "return_scores=1 is invalid"),
        (dict(num_beams=2, length_penalty=float("nan")), "length_penalty=nan is invalid: expected a finite number"),
        (dict(num_beams=2, length_penalty="1"), "length_penalty='1' is invalid"),
        (dict(max_new_tokens=-1), "max_new_tokens=-1 is invalid: expected an integer >= 0"),
        (dict(max_new_tokens=2.0), "max_new_tokens=2.0 is invalid"),
        (dict(min_new_tokens=-1), "min_new_tokens=-1 is invalid"),
        (dict(do_sample=True, generator=0), "generator=0 is invalid: expected None or a torch.Generator"),
        (dict(eos_token_id=True), "eos_token_id must be token ids"),
        (dict(eos_token_id=[3, -1]), "eos_token_id must be token ids"),
    ],
)
def test_bad_arguments_are_refused(options: dict, message: str) -> None:
    model = pf.Transformer(tiny("decoder"))
    with pytest.raises(ValueError, match=message):
        model.generate(torch.randint(1, 61, (1, 3)), **options)


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize(
    "prompt,mask,message",
    [
        (torch.zeros((1, 0), dtype=torch.long), None, r"input_ids=\(1, 0\) is invalid"),
        (torch.zeros((0, 3), dtype=torch.long), None, r"input_ids=\(0, 3\) is invalid"),
        (torch.ones(3, dtype=torch.long), None, r"input_ids=\(3,\) is invalid"),
        ([[1, 2]], None, "input_ids='list' is invalid"),
        (torch.ones((2, 3), dtype=torch.long), torch.ones(2, 4), r"attention_mask=\(2, 4\) is invalid"),
    ],
)
def test_bad_prompts_are_refused(arch: str, prompt, mask, message: str) -> None:
    """Empty prompts and empty batches (greedy and beam), a prompt that is not (batch, length), a mask that does not
    match it: each a ValueError naming the argument, never an IndexError deep inside."""
    model = pf.Transformer(tiny(arch))
    for beams in (1, 2):
        with pytest.raises(ValueError, match=message):
            model.generate(prompt, attention_mask=mask, max_new_tokens=2, num_beams=beams)


def test_generate_needs_a_language_model_head() -> None:
    model = pf.Transformer(tiny("decoder", head="none"))
    with pytest.raises(ValueError, match="needs a language-model head"):
        model.generate(torch.randint(1, 61, (1, 3)))


def test_max_new_tokens_zero_returns_the_prefix() -> None:
    model = pf.Transformer(tiny("encoder_decoder")).eval()
    src = torch.randint(1, 61, (2, 4))
    assert torch.equal(
        model.generate(src, max_new_tokens=0, num_beams=2, num_return_sequences=2), torch.zeros(4, 1, dtype=torch.long)
    )


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize("keep", [1, 3, 6])
def test_logits_to_keep_gives_the_last_positions_logits(arch: str, keep: int) -> None:
    model = pf.Transformer(tiny(arch)).eval()
    ids = torch.randint(0, model.cfg.vocab_size, (2, 6))
    inputs = {"input_ids": ids} if arch == "decoder" else {"input_ids": ids, "decoder_input_ids": ids}
    with torch.no_grad():
        every, last = model(**inputs).logits, model(**inputs, logits_to_keep=keep).logits
    assert last.shape == (2, keep, model.cfg.vocab_size)
    torch.testing.assert_close(last, every[:, -keep:], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "cfg, extra, message",
    [
        (tiny("decoder"), {"logits_to_keep": -1}, "logits_to_keep"),
        (tiny("decoder"), {"logits_to_keep": 1.5}, "logits_to_keep"),
        (tiny("decoder"), {"logits_to_keep": 1, "labels": torch.zeros(1, 4, dtype=torch.long)}, "with labels"),
        (tiny("encoder", head="classification", num_labels=3), {"logits_to_keep": 1}, "not a language-model head"),
    ],
)
def test_logits_to_keep_is_checked(cfg: pf.Config, extra: dict, message: str) -> None:
    model = pf.Transformer(cfg).eval()
    with pytest.raises(ValueError, match=message):
        model(torch.zeros(1, 4, dtype=torch.long), **extra)
