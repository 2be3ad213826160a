"""Fuzzing the model API: forward inputs and `generate` arguments of any shape, dtype and value are a `ValueError`
naming the argument, or outputs that are finite and well-formed. Never an IndexError from inside torch, a silent
NaN, or a silent broadcast."""

from __future__ import annotations

import math

import pytest
import torch
from fuzz_profiles import fuzz
from hypothesis import given
from hypothesis import strategies as st

import posformer as pf
from tests.conftest import tiny

VOCAB = 61
MODELS = {
    "decoder": tiny("decoder", position="rope", pad_token_id=0, eos_token_id=2),
    "encoder": tiny("encoder", type_vocab_size=2),
    "encoder_decoder": tiny("encoder_decoder", position="t5", pad_token_id=0, eos_token_id=2),
    "classifier": tiny("encoder", head="classification", num_labels=3, position="learned"),
    "span": tiny("encoder", head="span_qa", position="alibi"),
}
_built: dict[str, pf.Transformer] = {}


def model_of(kind: str) -> pf.Transformer:
    if kind not in _built:
        torch.manual_seed(0)
        _built[kind] = pf.Transformer(MODELS[kind]).eval()
    return _built[kind]


DTYPES = [torch.long, torch.int32, torch.float32, torch.bool, torch.int8]


@st.composite
def tensors(draw, batch: int, length: int, low: int, high: int):
    """None, a list, or a tensor of the expected shape or a nearby one, of some dtype, with values in [low, high]."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return None
    if choice == 1:
        return [[1, 2]]
    shape = (
        (batch, length)
        if choice < 6
        else draw(
            st.sampled_from(
                [(batch,), (batch, length + 1), (max(batch - 1, 0), length), (1, batch, length), (batch, 0), ()]
            )
        )
    )
    values = torch.randint(low, high + 1, shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 99))))
    return values.to(draw(st.sampled_from(DTYPES))) if draw(st.integers(0, 3)) == 0 else values


@st.composite
def forward_calls(draw):
    kind = draw(st.sampled_from(sorted(MODELS)))
    batch, length = draw(st.integers(0, 3)), draw(st.integers(0, 6))
    ids = draw(tensors(batch, length, -2, VOCAB + 2))
    kwargs = {
        name: draw(tensors(batch, length, low, high))
        for name, low, high in (("attention_mask", 0, 1), ("position_ids", -3, 70), ("token_type_ids", -1, 2))
        if draw(st.booleans())
    }
    if kind in ("decoder", "encoder", "encoder_decoder") and draw(st.booleans()):
        kwargs["labels"] = draw(tensors(batch, length, -101, VOCAB + 1))
    if kind == "classifier" and draw(st.booleans()):
        kwargs["labels"] = draw(tensors(batch, 1, -101, 4))
        if isinstance(kwargs["labels"], torch.Tensor) and kwargs["labels"].dim() == 2 and kwargs["labels"].shape[1]:
            kwargs["labels"] = kwargs["labels"][:, 0]
    if kind == "span":
        for name in ("start_positions", "end_positions"):
            kwargs[name] = torch.randint(-101, length + 2, (draw(st.sampled_from([batch, batch + 1])),))
    if kind == "encoder_decoder":
        kwargs["decoder_input_ids"] = draw(tensors(draw(st.sampled_from([batch, 1])), 3, 0, VOCAB - 1))
    return kind, ids, kwargs


@fuzz(300)
@given(forward_calls())
def test_forward_refuses_by_name_or_gives_finite_outputs(call) -> None:
    kind, ids, kwargs = call
    model = model_of(kind)
    try:
        out = model(ids, **kwargs)
    except ValueError as err:
        assert str(err)
        return
    batch = ids.shape[0]
    for name in ("logits", "start_logits", "end_logits", "loss", "last_hidden_state"):
        value = getattr(out, name)
        if value is not None:
            assert torch.isfinite(value).all(), f"{name} of {kind} is not finite for {ids}, {kwargs}"
            if value.dim() > 0:
                assert value.shape[0] == batch


GENERATE_VALUES = [None, -1, 0, 1, 2, 3, 0.5, 1.5, math.nan, math.inf, True, False, "1", "never", [2, 3], [-1]]
GENERATE_ARGS = [
    "max_new_tokens",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "eos_token_id",
    "pad_token_id",
    "num_beams",
    "length_penalty",
    "early_stopping",
    "num_return_sequences",
    "return_scores",
    "min_new_tokens",
]


@st.composite
def generate_calls(draw):
    kind = draw(st.sampled_from(["decoder", "encoder_decoder"]))
    batch, length = draw(st.integers(0, 2)), draw(st.integers(0, 4))
    prompt = torch.randint(3, VOCAB, (batch, length))
    names = draw(st.lists(st.sampled_from(GENERATE_ARGS), max_size=4, unique=True))
    kwargs = {name: draw(st.sampled_from(GENERATE_VALUES)) for name in names}
    kwargs.setdefault("max_new_tokens", 3)
    if draw(st.booleans()):
        kwargs["attention_mask"] = draw(tensors(batch, length, 0, 1))
    return kind, prompt, kwargs


@fuzz(200)
@given(generate_calls())
def test_generate_refuses_by_name_or_gives_tokens(call) -> None:
    kind, prompt, kwargs = call
    model = model_of(kind)
    try:
        out = model.generate(prompt, **kwargs)
    except ValueError as err:
        assert str(err)
        return
    tokens, scores = out if kwargs.get("return_scores") else (out, None)
    assert tokens.dtype == torch.long and tokens.dim() == 2
    assert ((tokens >= 0) & (tokens < VOCAB)).all()
    if scores is not None:
        assert not torch.isnan(scores).any()


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_fuzzed_models_work_on_good_input(kind: str) -> None:
    """The fuzz's models are sound: a plain input gives finite outputs (so its refusals are about the input)."""
    ids = torch.randint(1, VOCAB, (2, 5))
    extra = {"decoder_input_ids": ids[:, :3]} if kind == "encoder_decoder" else {}
    out = model_of(kind)(ids, **extra)
    assert torch.isfinite(out.logits if out.logits is not None else out.start_logits).all()
