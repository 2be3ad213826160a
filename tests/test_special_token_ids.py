"""Special token ids outside the vocabulary (issue 12): `Config` keeps them as metadata, as Hugging Face
does (GPT2Config's bos/eos 50256 in a tiny test vocabulary); only a use that feeds the id to the model
or writes it as a token refuses it, with a ValueError naming the field. Oracle: transformers 4.57.6
`generate`, which never stops at an eos id the model cannot emit."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import posformer as pf
from tests.conftest import tiny

TOKEN_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
OUTSIDE = 500  # a token id outside every vocabulary of this file (tiny(): 61 tokens)
NEW = 9


def _prompts(vocab_size: int) -> torch.Tensor:
    return torch.randint(1, vocab_size, (2, 4), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("name", TOKEN_FIELDS)
def test_config_keeps_an_id_outside_the_vocabulary(name: str) -> None:
    cfg = tiny("encoder_decoder", **{name: OUTSIDE})
    assert getattr(cfg, name) == OUTSIDE
    assert pf.Config.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("name", TOKEN_FIELDS)
@pytest.mark.parametrize("value", [-1, True, 2.0, "2"])
def test_config_refuses_what_is_not_a_token_id(name: str, value) -> None:
    with pytest.raises(ValueError) as info:
        tiny("encoder_decoder", **{name: value})
    assert str(info.value).startswith(f"Config.{name}={value!r} is invalid: expected None or a token id")


@pytest.mark.parametrize("num_beams", [1, 3])
def test_gpt2_default_eos_never_stops_generation_as_in_hf(tmp_path, num_beams: int) -> None:
    """GPT2Config's own bos = eos = 50256 in a 97-token model: both generate max_new_tokens tokens."""
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(
        GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=64, initializer_range=0.2)
    ).eval()
    hf.save_pretrained(tmp_path)
    model = pf.from_hf(tmp_path)
    assert model.cfg.eos_token_id == model.cfg.bos_token_id == 50256
    prompts = _prompts(97)
    theirs = hf.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=NEW,
        do_sample=False,
        num_beams=num_beams,
        pad_token_id=50256,
    )
    ours = model.generate(prompts, max_new_tokens=NEW, num_beams=num_beams)
    assert ours.shape == (2, 4 + NEW) and torch.equal(ours, theirs)


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize("options", [{}, {"num_beams": 3}, {"min_new_tokens": 3}], ids=["greedy", "beam", "min"])
def test_an_eos_id_outside_the_vocabulary_never_ends_a_row(arch: str, options: dict) -> None:
    """Config's eos outside the vocabulary, or first in a list, generates what no eos at all generates."""
    model = pf.Transformer(tiny(arch, eos_token_id=OUTSIDE, pad_token_id=OUTSIDE)).eval()
    prompts = _prompts(model.cfg.vocab_size)
    free = model.generate(prompts, max_new_tokens=NEW, eos_token_id=[], **options)
    assert torch.equal(model.generate(prompts, max_new_tokens=NEW, **options), free)
    stop = int(free[0, -NEW + 1])  # the second token row 0 generates: the row ends there
    listed = model.generate(prompts, max_new_tokens=NEW, eos_token_id=[OUTSIDE, stop], pad_token_id=7, **options)
    assert torch.equal(
        listed, model.generate(prompts, max_new_tokens=NEW, eos_token_id=stop, pad_token_id=7, **options)
    )


@pytest.mark.parametrize("num_beams", [1, 2])
def test_a_pad_id_outside_the_vocabulary_is_refused_when_a_row_can_end(num_beams: int) -> None:
    model = pf.Transformer(tiny("decoder", pad_token_id=OUTSIDE, eos_token_id=3)).eval()
    prompts = _prompts(model.cfg.vocab_size)
    with pytest.raises(ValueError, match=r"^Config\.pad_token_id=500 is invalid: .*\[0, vocab_size=61\).*eos"):
        model.generate(prompts, max_new_tokens=NEW, num_beams=num_beams)
    with pytest.raises(ValueError, match=r"^pad_token_id=61 is invalid: .*\[0, vocab_size=61\)"):
        model.generate(prompts, max_new_tokens=NEW, num_beams=num_beams, pad_token_id=61)
    assert model.generate(prompts, max_new_tokens=NEW, num_beams=num_beams, pad_token_id=7).shape[0] == 2
    assert model.generate(prompts, max_new_tokens=NEW, num_beams=num_beams, eos_token_id=[]).shape == (2, 4 + NEW)


@pytest.mark.parametrize("start", [OUTSIDE, None])
def test_encoder_decoder_generation_needs_the_start_token(start) -> None:
    model = pf.Transformer(tiny("encoder_decoder", decoder_start_token_id=start)).eval()
    with pytest.raises(ValueError, match=rf"^Config\.decoder_start_token_id={start} is invalid: .*starts every output"):
        model.generate(_prompts(model.cfg.vocab_size), max_new_tokens=NEW)


@pytest.mark.parametrize(
    "field, message",
    [
        ("decoder_start_token_id", r"^Config\.decoder_start_token_id=500 is invalid: .*shift_right starts"),
        ("pad_token_id", r"^Config\.pad_token_id=500 is invalid: .*shift_right writes it where labels hold -100"),
    ],
)
def test_shift_right_needs_start_and_pad_as_tokens(field: str, message: str) -> None:
    model = pf.Transformer(tiny("encoder_decoder", **{field: OUTSIDE}))
    source, labels = _prompts(61), _prompts(61)[:, :3]
    with pytest.raises(ValueError, match=message):
        model(source, labels=labels)
    out = model(source, decoder_input_ids=labels, labels=labels)  # given decoder inputs: nothing needs the id
    assert torch.isfinite(out.loss)


def test_models_with_every_id_outside_the_vocabulary_run_forward() -> None:
    ids = {name: OUTSIDE for name in TOKEN_FIELDS}
    for arch in ("encoder", "decoder"):
        model = pf.Transformer(tiny(arch, **ids))
        prompts = _prompts(61)
        assert torch.isfinite(model(prompts, labels=prompts).loss)
