"""Greedy and beam search equal Hugging Face `generate` (transformers 4.57.6) token for token.

Tiny random HF models (LLaMA: GQA + RoPE, GPT-2: learned positions, BLOOM: ALiBi,
T5: encoder-decoder with relative buckets, BERT2BERT: an EncoderDecoderModel of two
BERTs with learned positions and separate embeddings) are saved, loaded with `pf.from_hf`
and both generate from the same batch: prompts of different lengths, left-padded
for the decoders, a right-padded source for the encoder-decoders. The eos token is one the model emits
early (taken from a first greedy run), so rows stop, get padded, and beams finish
at different lengths.
"""

from __future__ import annotations

import pytest
import torch
import transformers

import posformer as pf

VOCAB = 97
NEW = 10
PAD = 5  # the fill after eos: not 0, see test_beam_pad_zero_is_hf_eos_fill
ENCODER_DECODERS = ("t5", "bert2bert")
MODEL_TYPES = {"bert2bert": "encoder-decoder"}  # the posformer.hf family of a name here, where it differs
BEAMS = [  # num_beams, length_penalty, early_stopping, num_return_sequences
    (3, 1.0, False, 1),
    (4, 2.0, True, 2),
    (2, -0.5, "never", 2),
    (3, 1.5, "never", 3),
    (2, 0.0, False, 1),
]


def _hf_model(family: str):
    torch.manual_seed(0)
    if family == "llama":
        return transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                vocab_size=VOCAB,
                hidden_size=32,
                intermediate_size=40,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=64,
                initializer_range=0.2,
            )
        )
    if family == "gpt2":
        return transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=VOCAB,
                n_embd=32,
                n_layer=2,
                n_head=4,
                n_positions=64,
                initializer_range=0.2,
                bos_token_id=1,
                eos_token_id=2,
            )
        )
    if family == "bloom":
        return transformers.BloomForCausalLM(
            transformers.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4, initializer_range=0.2)
        )
    if family == "bert2bert":
        bert = dict(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=40,
            max_position_embeddings=64,
            initializer_range=0.5,
        )
        return transformers.EncoderDecoderModel(
            transformers.EncoderDecoderConfig.from_encoder_decoder_configs(
                transformers.BertConfig(**bert),
                transformers.BertConfig(**bert, is_decoder=True, add_cross_attention=True),
                decoder_start_token_id=2,
                pad_token_id=0,
                eos_token_id=1,
            )
        )
    return transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=40,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=20,
            initializer_factor=4.0,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        )
    )


def _batch(family: str) -> dict[str, torch.Tensor]:
    """Three inputs of lengths 7, 4 and 2: left-padded for a decoder, right-padded for T5's encoder."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    mask[2, :5] = 0
    if family in ENCODER_DECODERS:
        mask = mask.flip(1)
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}


@pytest.fixture(scope="module", params=["llama", "gpt2", "bloom", "t5", "bert2bert"])
def pair(request, tmp_path_factory):
    """(family, HF model, posformer model with the same weights, batch, an eos id the model emits early)."""
    family = request.param
    if MODEL_TYPES.get(family, family) not in pf.hf.supported():
        pytest.skip(f"posformer.hf has no {family!r} family yet")
    hf = _hf_model(family).eval()
    directory = tmp_path_factory.mktemp(family)
    hf.save_pretrained(directory, safe_serialization=True)
    ours = pf.from_hf(directory)
    batch = _batch(family)
    with torch.no_grad():
        free = hf.generate(**batch, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=PAD)
    eos = int(free[0, -NEW + 2])  # the third token the first row generates
    assert eos != PAD
    return family, hf, ours, batch, eos


def _both(pair, **options) -> tuple[torch.Tensor, torch.Tensor]:
    _, hf, ours, batch, _ = pair
    with torch.no_grad():
        theirs = hf.generate(**batch, do_sample=False, max_new_tokens=NEW, **options)
    return ours.generate(**batch, max_new_tokens=NEW, **options), theirs


@pytest.mark.parametrize("pad", [PAD, 0])
def test_greedy_equals_hf(pair, pad):
    eos = pair[4]
    ours, theirs = _both(pair, eos_token_id=eos, pad_token_id=pad)
    assert torch.equal(ours, theirs), f"\n{ours}\n{theirs}"
    assert (ours[:, -1] == pad).any(), f"no row ended before max_new_tokens:\n{ours}"


def test_default_eos_and_pad_come_from_the_config(pair):
    """No eos_token_id: both read the checkpoint's eos id; pad_token_id only where the config has none."""
    family, hf, ours, batch, _ = pair
    pad = {} if family in ENCODER_DECODERS else {"pad_token_id": PAD}
    with torch.no_grad():
        theirs = hf.generate(**batch, do_sample=False, max_new_tokens=NEW, num_beams=2, **pad)
    assert torch.equal(ours.generate(**batch, max_new_tokens=NEW, num_beams=2, **pad), theirs)


def test_greedy_without_eos_equals_hf(pair):
    _, hf, model, batch, _ = pair
    ours = model.generate(**batch, max_new_tokens=NEW, eos_token_id=[])
    with torch.no_grad():
        theirs = hf.generate(**batch, do_sample=False, max_new_tokens=NEW, eos_token_id=None, pad_token_id=PAD)
    assert torch.equal(ours, theirs), f"\n{ours}\n{theirs}"


@pytest.mark.parametrize("beams,length_penalty,early_stopping,returned", BEAMS, ids=lambda v: str(v))
def test_beam_search_equals_hf(pair, beams, length_penalty, early_stopping, returned):
    eos = pair[4]
    ours, theirs = _both(
        pair,
        num_beams=beams,
        length_penalty=length_penalty,
        early_stopping=early_stopping,
        num_return_sequences=returned,
        eos_token_id=eos,
        pad_token_id=PAD,
    )
    assert torch.equal(ours, theirs), f"\n{ours}\n{theirs}"


def test_beam_search_finishes_early_and_pads(pair):
    """At least one returned hypothesis ends before max_new_tokens: the eos and pad paths run."""
    eos = pair[4]
    ours, theirs = _both(pair, num_beams=3, num_return_sequences=3, eos_token_id=eos, pad_token_id=PAD)
    assert torch.equal(ours, theirs)
    assert (ours[:, -1] == PAD).any(), f"no hypothesis ended early:\n{ours}"


def test_beam_search_with_two_eos_ids_equals_hf(pair):
    """Two eos ids: K = 3 * num_beams candidates per step."""
    family, hf, model, batch, eos = pair
    with torch.no_grad():
        free = hf.generate(**batch, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=PAD)
    second = int(free[-1, -NEW + 3])
    ids = [eos, second] if second not in (eos, PAD) else [eos]
    ours, theirs = _both(pair, num_beams=3, num_return_sequences=2, eos_token_id=ids, pad_token_id=PAD)
    assert torch.equal(ours, theirs), f"\n{ours}\n{theirs}"


def test_beam_search_without_eos_equals_hf(pair):
    _, hf, model, batch, _ = pair
    ours = model.generate(**batch, max_new_tokens=NEW, num_beams=3, num_return_sequences=2, eos_token_id=[])
    with torch.no_grad():
        theirs = hf.generate(
            **batch,
            do_sample=False,
            max_new_tokens=NEW,
            num_beams=3,
            num_return_sequences=2,
            eos_token_id=None,
            pad_token_id=PAD,
        )
    assert torch.equal(ours, theirs), f"\n{ours}\n{theirs}"


def test_beam_pad_zero_is_hf_eos_fill(pair):
    """Known difference: HF beam search fills ended hypotheses with eos when pad_token_id is 0
    (`pad or eos` on a tensor 0); posformer fills with the pad_token_id it is given, as greedy does."""
    eos = pair[4]
    ours, theirs = _both(pair, num_beams=3, num_return_sequences=3, eos_token_id=eos, pad_token_id=0)
    prefix = pair[3]["input_ids"].shape[1] if pair[0] not in ENCODER_DECODERS else 1
    new_ours, new_theirs = ours[:, prefix:], theirs[:, prefix:]
    after_eos = (new_theirs == eos).long().cumsum(1).roll(1, dims=1).index_fill(1, torch.tensor([0]), 0) > 0
    assert torch.equal(ours[:, :prefix], theirs[:, :prefix])
    assert torch.equal(new_ours[~after_eos], new_theirs[~after_eos])
    assert (new_ours[after_eos] == 0).all() and (new_theirs[after_eos] == eos).all()
