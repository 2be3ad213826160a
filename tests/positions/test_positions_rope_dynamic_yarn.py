"""Dynamic YaRN (Peng et al. 2023, section 3.3): RoPE unscaled up to the original length L0, static YaRN with
the factor L / L0 past it (our "yarn", tested against Hugging Face in test_positions_rope_scaling.py, and an
independent float64 formula here); its fine-tuned form (factor f > 1) is YaRN at f up to f * L0. Generation over
the KV cache equals greedy decoding by full passes, across L0, because the decoder runs the sequence again at
every step whose length changes the frequencies."""

from __future__ import annotations

import math

import pytest
import torch

import posformer as pf
from posformer.generation import Decoding
from posformer.hf.family import UnsupportedCheckpoint
from posformer.hf.rope import rope_to_hf
from posformer.positions import rope_inv_freq
from posformer.positions.rope_scaling import fixed_up_to
from posformer.positions.rotary import Rotary
from tests.conftest import tiny

ORIGINAL = 16


def dynamic(factor: float = 1.0, original: int = ORIGINAL, **keys) -> dict:
    return {"type": "dynamic_yarn", "factor": factor, "original_max_position_embeddings": original, **keys}


def static(factor: float, original: int = ORIGINAL, **keys) -> dict:
    return {"type": "yarn", "factor": factor, "original_max_position_embeddings": original, **keys}


def paper_yarn(dim: int, base: float, s: float, original: int) -> tuple[torch.Tensor, float]:
    """YaRN's frequencies and attention factor in float64, written from the paper and its code: the ramp runs
    over the dim indices from floor(corr(32)) to ceil(corr(1)), corr(b) = dim ln(L0 / (2 pi b)) / (2 ln base)."""

    def corr(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), dim - 1)
    theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    return theta / s * ramp + theta * (1 - ramp), 0.1 * math.log(s) + 1


# ------------------------------------------------------------------------------------------- frequencies
@pytest.mark.parametrize("dim", [16, 64, 128])
@pytest.mark.parametrize("seq_len", [None, 1, 8, ORIGINAL])
def test_up_to_the_original_length_it_is_rope_unscaled(dim: int, seq_len: int | None) -> None:
    inv_freq, attention_factor = rope_inv_freq(dim, 10000.0, dynamic(mscale=1.0, mscale_all_dim=0.5), seq_len)
    assert torch.equal(inv_freq, rope_inv_freq(dim)[0]) and attention_factor == 1.0


YARN_KEYS = [{}, {"truncate": False}, {"beta_fast": 16.0, "beta_slow": 2.0}, {"mscale": 1.0, "mscale_all_dim": 0.5}]


@pytest.mark.parametrize("dim", [16, 64, 128])
@pytest.mark.parametrize("seq_len", [ORIGINAL + 1, 3 * ORIGINAL, 1000])
@pytest.mark.parametrize("keys", YARN_KEYS, ids=lambda k: "-".join(k) or "defaults")
def test_past_the_original_length_it_is_static_yarn_with_factor_length_over_original(dim, seq_len, keys) -> None:
    ours = rope_inv_freq(dim, 10000.0, dynamic(**keys), seq_len)
    theirs = rope_inv_freq(dim, 10000.0, static(seq_len / ORIGINAL, **keys))
    assert torch.equal(ours[0], theirs[0]) and ours[1] == theirs[1]
    assert not torch.equal(ours[0], rope_inv_freq(dim)[0])


@pytest.mark.parametrize("dim", [16, 64, 128])
@pytest.mark.parametrize("base", [10000.0, 500.0])
@pytest.mark.parametrize("seq_len", [ORIGINAL + 1, 40, 1000])
def test_past_the_original_length_it_follows_the_papers_formula(dim: int, base: float, seq_len: int) -> None:
    inv_freq, attention_factor = rope_inv_freq(dim, base, dynamic(), seq_len)
    expected, expected_factor = paper_yarn(dim, base, seq_len / ORIGINAL, ORIGINAL)
    torch.testing.assert_close(inv_freq.double(), expected, rtol=1e-6, atol=0)
    assert attention_factor == pytest.approx(expected_factor, rel=1e-12)


@pytest.mark.parametrize("seq_len", [None, 1, ORIGINAL, 2 * ORIGINAL, 3 * ORIGINAL, 3 * ORIGINAL + 1, 500])
def test_a_fine_tuned_factor_holds_until_the_length_passes_it(seq_len: int | None) -> None:
    """factor 3: YaRN at 3 up to 3 L0 tokens (the fine-tuned model as trained), at L / L0 beyond."""
    s = 3.0 if seq_len is None else max(3.0, seq_len / ORIGINAL)
    ours = rope_inv_freq(64, 10000.0, dynamic(3.0), seq_len)
    theirs = rope_inv_freq(64, 10000.0, static(s))
    assert torch.equal(ours[0], theirs[0]) and ours[1] == theirs[1]


@pytest.mark.parametrize("original", [1, 3, 7, 10, 16, 4096])
def test_the_fixed_length_is_the_longest_whose_factor_is_unchanged(original: int) -> None:
    """`fixed_up_to` against the definition, max {L : L / L0 <= factor}, over factors whose product with L0 rounds
    either way in floating point."""
    for factor in [1.0, 1.1, 4 / 3, 2.5, 0.7 * 10, 1 / 3 * 9, 1.0 + 1e-12, *(1 + k / 97 for k in range(60))]:
        scaling = dynamic(factor, original)
        expected = max(n for n in range(1, int(factor * original) + 3) if n / original <= factor)
        assert fixed_up_to(scaling) == expected, (factor, original)


def test_the_encoding_changes_frequencies_exactly_past_the_fixed_length() -> None:
    cfg = tiny(position="rope", position_params={"scaling": dynamic(2.0)}, d_model=64, n_heads=2)
    rope = pf.positions.build(cfg, causal=True, n_layers=1)
    assert rope.stale_beyond() == 2 * ORIGINAL
    assert [rope.stale_at(n) for n in (ORIGINAL, 2 * ORIGINAL, 2 * ORIGINAL + 1, 100)] == [False, False, True, True]
    for n in (1, 2 * ORIGINAL, 2 * ORIGINAL + 1, 100):
        inv_freq, factor = rope.frequencies_for(n)
        expected = rope_inv_freq(32, 10000.0, static(max(2.0, n / ORIGINAL)))
        assert torch.equal(inv_freq, expected[0]) and factor == expected[1]


# ----------------------------------------------------------------------------------------- a full pass
def same_weights(cfg: pf.Config, params: dict, source: pf.Transformer) -> pf.Transformer:
    model = pf.Transformer(cfg.replace(position_params=params)).eval()
    model.load_state_dict(source.state_dict())
    return model


@torch.no_grad()
def test_a_full_pass_is_rope_up_to_the_original_length_and_static_yarn_past_it() -> None:
    cfg = tiny(position="rope", position_params={"scaling": dynamic()}, init_std=0.3)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 40))
    for length, params in ((ORIGINAL, {}), (ORIGINAL + 1, {"scaling": static((ORIGINAL + 1) / ORIGINAL)})):
        expected = same_weights(cfg, params, model)(ids[:, :length]).logits
        torch.testing.assert_close(model(ids[:, :length]).logits, expected, rtol=0, atol=0)
    static_yarn = same_weights(cfg, {"scaling": static(40 / ORIGINAL)}, model)
    torch.testing.assert_close(model(ids).logits, static_yarn(ids).logits, rtol=0, atol=0)


# -------------------------------------------------------------------------------------------- the cache
def full_pass_logits(model: pf.Transformer, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The last position's logits (B, V) of one pass over the whole sequence, no cache."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return model(ids, attention_mask=mask, position_ids=positions).logits[:, -1].float()


@torch.no_grad()
@pytest.mark.parametrize("factor, prompt", [(1.0, 5), (1.0, 20), (1.5, 12)], ids=["short", "long", "fine-tuned"])
def test_every_cached_step_equals_a_full_pass_across_the_original_length(factor: float, prompt: int) -> None:
    """Left-padded rows (3 pads) of `prompt` tokens, then 16 steps: from below L0 = 16 to past it (the prompt of
    20 starts past it; factor 1.5 holds until 24). Each step's logits equal a full pass over the tokens so far."""
    cfg = tiny(position="rope", position_params={"scaling": dynamic(factor)}, n_kv_heads=2, init_std=0.3)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(1, cfg.vocab_size, (2, prompt + 16))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids = ids.masked_fill(mask == 0, 0)
    state = Decoding(model, ids[:, :prompt], mask[:, :prompt], max_new_tokens=16)
    torch.testing.assert_close(state.start(), full_pass_logits(model, ids[:, :prompt], mask[:, :prompt]))
    for t in range(prompt, prompt + 16):
        torch.testing.assert_close(
            state.step(ids[:, t]), full_pass_logits(model, ids[:, : t + 1], mask[:, : t + 1]), rtol=1e-5, atol=1e-5
        )


@torch.no_grad()
def test_the_cache_alone_goes_stale_past_the_original_length() -> None:
    """Why generation runs the sequence again: stepping a cache without it, the keys rotated at shorter lengths
    no longer match a full pass once the length passes L0."""
    cfg = tiny(position="rope", position_params={"scaling": dynamic()}, init_std=0.3)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 24))
    cache = pf.Cache(cfg.n_layers)
    model(ids[:, :ORIGINAL], cache=cache)
    stepped = [model(ids[:, t : t + 1], cache=cache).logits[:, -1] for t in range(ORIGINAL, 24)]
    full = model(ids).logits[:, -1]
    assert not torch.allclose(stepped[-1], full, rtol=1e-3, atol=1e-3)


@torch.no_grad()
def test_generate_equals_greedy_decoding_by_full_passes() -> None:
    """Prompts of 10 tokens (one row left-padded), 14 new tokens: past L0 = 16 at the 7th."""
    cfg = tiny(position="rope", position_params={"scaling": dynamic()}, init_std=0.3)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(1, cfg.vocab_size, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    ids = ids.masked_fill(mask == 0, 0)
    ours = model.generate(ids, attention_mask=mask, max_new_tokens=14, eos_token_id=[])
    for _ in range(14):
        next_ids = full_pass_logits(model, ids, mask).argmax(-1)
        ids, mask = torch.cat([ids, next_ids[:, None]], 1), torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    assert torch.equal(ours, ids)


# ------------------------------------------------------------------------------------ settings and errors
def test_rescaled_params_give_the_training_free_form_at_the_trained_length() -> None:
    assert Rotary.rescaled_params({}, "dynamic_yarn", 64, 64)["scaling"] == dynamic(1.0, 64)
    assert Rotary.rescaled_params({}, "dynamic_yarn", 256, 64)["scaling"] == dynamic(4.0, 64)


@pytest.mark.parametrize(
    "scaling, key",
    [
        ({"type": "dynamic_yarn", "factor": 1.0}, "original_max_position_embeddings"),
        (dynamic(0.5), "factor"),
        (dynamic(original=0), "original_max_position_embeddings"),
        (dynamic(beta_fast=1.0), "beta_fast"),
        (dynamic(truncate=1), "truncate"),
        (dynamic(attention_factor=1.2), "attention_factor"),  # the attention factor follows the length
    ],
)
def test_bad_settings_are_named(scaling: dict, key: str) -> None:
    with pytest.raises(ValueError) as info:
        tiny(position="rope", position_params={"scaling": scaling})
    assert "position_params['scaling']" in str(info.value) and repr(key) in str(info.value)
    with pytest.raises(ValueError, match=key):
        rope_inv_freq(16, 10000.0, scaling)


def test_hugging_face_has_no_dynamic_yarn() -> None:
    cfg = tiny(position="rope", position_params={"scaling": dynamic()})
    with pytest.raises(UnsupportedCheckpoint, match="'dynamic_yarn' has no Hugging Face equivalent"):
        rope_to_hf(cfg)
