"""M-RoPE in a model (`rope` with `mrope_section`): position ids with axes (3, B, T) through the forward, the KV
cache and generation. The rotation itself is proven against Qwen2-VL and Qwen3-VL in tests/hf/test_hf_mrope.py."""

from __future__ import annotations

import pytest
import torch

import posformer as pf

SECTION = [2, 3, 3]  # head_dim 16: 8 rotary pairs


def config(interleaved: bool = False, **overrides) -> pf.Config:
    params = {"mrope_section": SECTION, "mrope_interleaved": interleaved}
    fields = dict(
        arch="decoder", vocab_size=61, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96,
        position="rope", position_params=params, norm="rmsnorm", activation="swiglu", init_std=0.3,
    )  # fmt: skip
    return pf.Config(**{**fields, **overrides})


def image_prompt(batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (B, 3 + 2*3 + 2) and their ids with axes (3, B, 11): text, a 2 x 3 image, text."""
    pos = pf.positions.image_position_ids(3, 2, 3, 2)
    ids = torch.randint(1, 61, (batch, pos.shape[1]), generator=torch.Generator().manual_seed(0))
    return ids, pos[:, None].expand(3, batch, -1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_text_ids_on_every_axis_give_ordinary_rope_exactly(interleaved: bool) -> None:
    torch.manual_seed(0)
    mrope = pf.Transformer(config(interleaved)).eval()
    rope = pf.Transformer(config(position_params={})).eval()
    rope.load_state_dict(mrope.state_dict())
    ids = torch.randint(1, 61, (2, 9))
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [4, 5, 6, 7, 8, 9, 10, 11, 12]])
    expected = rope(ids, position_ids=pos).logits
    torch.testing.assert_close(mrope(ids, position_ids=pos.expand(3, 2, 9)).logits, expected, rtol=0, atol=0)
    torch.testing.assert_close(mrope(ids, position_ids=pos).logits, expected, rtol=0, atol=0)


def test_the_axes_change_the_logits_where_an_image_lies() -> None:
    """Image ids are not text ids: rows of patches at one temporal position but different heights and widths."""
    torch.manual_seed(0)
    model = pf.Transformer(config()).eval()
    ids, axes = image_prompt()
    text = axes.amax(0)
    with_axes, as_text = model(ids, position_ids=axes).logits, model(ids, position_ids=text).logits
    torch.testing.assert_close(with_axes[:, :4], as_text[:, :4], rtol=0, atol=0)  # text, and the first patch
    assert (with_axes[:, 4:] - as_text[:, 4:]).abs().amax() > 1e-3


@pytest.mark.parametrize("interleaved", [False, True])
def test_cached_decoding_goes_on_from_the_largest_position_as_a_full_pass(interleaved: bool) -> None:
    """After an image the next token sits at the largest position + 1 on every axis (Hugging Face's rope deltas):
    a cached decode without position ids equals one full pass given those ids."""
    torch.manual_seed(0)
    model = pf.Transformer(config(interleaved)).eval()
    ids, axes = image_prompt()
    more = torch.randint(1, 61, (2, 4))
    after = (axes.amax() + 1 + torch.arange(4)).expand(3, 2, 4)
    full = model(torch.cat((ids, more), 1), position_ids=torch.cat((axes, after), -1)).logits
    cache = pf.Cache(model.cfg.n_layers)
    steps = [model(ids, position_ids=axes, cache=cache).logits]
    steps += [model(more[:, t : t + 1], cache=cache).logits for t in range(4)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def test_generation_from_an_image_prompt_equals_greedy_full_passes() -> None:
    torch.manual_seed(0)
    model = pf.Transformer(config(interleaved=True)).eval()
    ids, axes = image_prompt()
    out = model.generate(ids, max_new_tokens=5, position_ids=axes)
    tokens, pos = ids, axes
    for _ in range(5):
        following = tokens.new_full((3, 2, 1), int(pos.amax()) + 1)
        nxt = model(tokens, position_ids=pos).logits[:, -1].argmax(-1, keepdim=True)
        tokens, pos = torch.cat((tokens, nxt), 1), torch.cat((pos, following), -1)
    assert torch.equal(out, tokens)


def test_beam_search_over_text_axes_equals_beam_search_over_text_ids() -> None:
    """Beams reorder the ids with axes as they reorder the cache: all axes alike give the beams of (B, T) ids."""
    torch.manual_seed(0)
    model = pf.Transformer(config()).eval()
    ids = torch.randint(1, 61, (2, 6))
    pos = torch.arange(6).expand(2, 6)
    kwargs = dict(max_new_tokens=4, num_beams=3, num_return_sequences=2)
    assert torch.equal(
        model.generate(ids, position_ids=pos.expand(3, 2, 6), **kwargs), model.generate(ids, position_ids=pos, **kwargs)
    )


@pytest.mark.parametrize(
    "pos, match",
    [
        (torch.zeros(2, 2, 5, dtype=torch.long), r"shape \(2, 2, 5\).*\(3, batch, length\)"),
        (torch.zeros(3, 2, 5), r"dtype torch.float32.*integer"),
        (torch.full((3, 2, 5), -1), r"-1.*>= 0"),
        (torch.zeros(3, 2, 4, dtype=torch.long), r"position_ids axes has shape \(2, 4\)"),
    ],
)
def test_bad_ids_with_axes_are_refused_by_name(pos: torch.Tensor, match: str) -> None:
    model = pf.Transformer(config()).eval()
    with pytest.raises(ValueError, match=match):
        model(torch.ones(2, 5, dtype=torch.long), position_ids=pos)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"mrope_section": [2, 3, 4]}, r"mrope_section.*sum to 8"),
        ({"mrope_section": [4, 4]}, r"mrope_section.*three integers"),
        ({"mrope_section": SECTION, "mrope_interleaved": 1}, r"mrope_interleaved"),
        (
            {
                "mrope_section": SECTION,
                "scaling": {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16},
            },
            r"scaling.*mrope_section",
        ),
    ],
)
def test_a_bad_mrope_setting_is_refused_by_name(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        config(position_params=params)


def test_ids_with_axes_cannot_follow_sink_tokens() -> None:
    model = pf.Transformer(config(sink_tokens=2)).eval()
    ids, axes = image_prompt()
    with pytest.raises(ValueError, match="sink_tokens"):
        model(ids, position_ids=axes)


@pytest.mark.parametrize("name", ["rerope", "self_extend", "hope"])
def test_other_rotary_encodings_take_rope_parameters_but_refuse_axes_by_name(name: str) -> None:
    """A rope config's parameters carry over to its context-extension methods; an mrope_section does not."""
    rope = config(position_params={})
    assert pf.Transformer(rope.replace(position=name, position_params=dict(rope.position_params)))
    with pytest.raises(ValueError, match=rf"position_params\['mrope_section'\].*position={name!r}"):
        config(position=name)
