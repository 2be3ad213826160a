"""Multi-axis RoPE's defining properties (`positions.mrope`): over text, whose axes agree, it is RoPE exactly, for
either layout of the sections; an axis moves only its own pairs; bad sections and ids are refused by name. Its
parity with Hugging Face's Qwen2-VL and Qwen3-VL: tests/hf/test_hf_mrope.py."""

from __future__ import annotations

import pytest
import torch

from posformer.positions.mrope import axis_of_pairs, check_axes_positions, check_section, mrope_cos_sin
from posformer.positions.rotary import rope_cos_sin, rope_inv_freq


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("section", [(16, 24, 24), (24, 20, 20), (64, 0, 0)])
def test_text_positions_on_every_axis_give_rope_exactly(section: tuple, interleaved: bool) -> None:
    pos = torch.randint(0, 10_000, (2, 17))
    inv_freq, _ = rope_inv_freq(128, 1e6)
    cos, sin = mrope_cos_sin(pos.expand(3, -1, -1), inv_freq, axis_of_pairs(section, interleaved))
    rope_cos, rope_sin = rope_cos_sin(pos, inv_freq)
    assert torch.equal(cos, rope_cos) and torch.equal(sin, rope_sin)


@pytest.mark.parametrize("interleaved", [False, True])
def test_each_axis_turns_its_own_pairs_only(interleaved: bool) -> None:
    section = (6, 5, 5)  # interleaved, an axis of h pairs reads every third pair below 3h: 3 * 5 <= 16
    axis = axis_of_pairs(section, interleaved)
    assert [int((axis == a).sum()) for a in range(3)] == list(section)
    inv_freq, _ = rope_inv_freq(32, 1e4)
    base = torch.zeros(3, 1, 1, dtype=torch.long)
    for moved in range(3):
        pos = base.clone()
        pos[moved] = 7
        cos, _ = mrope_cos_sin(pos, inv_freq, axis)
        turned = cos[0, 0, 0] != 1
        assert torch.equal(turned, axis == moved), moved


def test_sections_that_do_not_fill_half_the_rotary_width_are_refused_by_name() -> None:
    assert check_section([16, 24, 24], 64) == (16, 24, 24)
    for bad in ([16, 24, 23], [16, 24], [16.0, 24, 24], (-1, 33, 32), "16,24,24"):
        with pytest.raises(ValueError, match=r"mrope_section=.* is invalid: expected three integers >= 0 .* sum to 64"):
            check_section(bad, 64)


@pytest.mark.parametrize(
    "pos,said",
    [
        (torch.zeros(2, 5, dtype=torch.long), r"of shape \(2, 5\) is invalid: expected \(3, batch, length\)"),
        (torch.zeros(2, 1, 5, dtype=torch.long), r"of shape \(2, 1, 5\) is invalid"),
        (torch.zeros(3, 1, 5), r"of dtype torch.float32 is invalid: expected integer positions"),
        (torch.full((3, 1, 5), -1), r"holds -1: expected positions >= 0"),
    ],
)
def test_axes_positions_of_the_wrong_shape_dtype_or_sign_are_refused_by_name(pos: torch.Tensor, said: str) -> None:
    with pytest.raises(ValueError, match="position_ids " + said):
        check_axes_positions(pos)
