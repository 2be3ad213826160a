"""Multi-axis RoPE (`positions.mrope`) against Hugging Face's own, under transformers 4.57.6 and 5.x alike: q and
k rotated as Qwen2-VL's contiguous sections and Qwen3-VL's interleaved ones rotate them (each version's rotary
module and apply function), and the position ids of text around an image as `get_rope_index` builds them."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
import transformers
from transformers.models.qwen2_vl import configuration_qwen2_vl, modeling_qwen2_vl
from transformers.models.qwen3_vl import configuration_qwen3_vl, modeling_qwen3_vl

from posformer.positions.mrope import axis_of_pairs, image_position_ids, mrope_cos_sin
from posformer.positions.rotary import apply_rotary, rope_inv_freq

HEAD_DIM, THETA = 32, 1e4
SECTION = {False: (4, 6, 6), True: (6, 5, 5)}  # 16 pairs, as Qwen2-VL's (16, 24, 24) and Qwen3-VL's (24, 20, 20)
V5 = int(transformers.__version__.split(".")[0]) >= 5


def _text_config(interleaved: bool) -> object:
    """A Qwen2-VL (contiguous) or Qwen3-VL (interleaved) text config of heads of HEAD_DIM, in the version's form."""
    section = list(SECTION[interleaved])
    rope = {"mrope_section": section, **({"mrope_interleaved": True} if interleaved else {})}
    if V5:
        kind = {"rope_parameters": {"rope_type": "default", "rope_theta": THETA, **rope}}
    else:
        kind = {"rope_theta": THETA, "rope_scaling": {"rope_type": "default", **rope}}
    config = configuration_qwen3_vl.Qwen3VLTextConfig if interleaved else configuration_qwen2_vl.Qwen2VLTextConfig
    return config(hidden_size=2 * HEAD_DIM, num_attention_heads=2, head_dim=HEAD_DIM, **kind)


def _hf_rotated(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, interleaved: bool) -> tuple:
    module = modeling_qwen3_vl if interleaved else modeling_qwen2_vl
    rotary = (module.Qwen3VLTextRotaryEmbedding if interleaved else module.Qwen2VLRotaryEmbedding)(
        _text_config(interleaved)
    )
    cos, sin = rotary(q, pos)
    if cos.dim() == 4:  # 4.57.6's Qwen2-VL: one table per axis, sectioned by the apply function
        return module.apply_multimodal_rotary_pos_emb(q, k, cos, sin, list(SECTION[interleaved]))
    return module.apply_rotary_pos_emb(q, k, cos, sin)


@pytest.mark.parametrize("interleaved", [False, True], ids=["qwen2_vl", "qwen3_vl"])
def test_q_and_k_rotate_as_hugging_face_rotates_them(interleaved: bool) -> None:
    torch.manual_seed(0)
    pos = torch.randint(0, 50, (3, 2, 11))
    q, k = torch.randn(2, 4, 11, HEAD_DIM), torch.randn(2, 2, 11, HEAD_DIM)
    q_hf, k_hf = _hf_rotated(q, k, pos, interleaved)
    inv_freq, _ = rope_inv_freq(HEAD_DIM, THETA)
    cos, sin = mrope_cos_sin(pos, inv_freq, axis_of_pairs(SECTION[interleaved], interleaved))
    torch.testing.assert_close(apply_rotary(q, cos, sin, "half"), q_hf)
    torch.testing.assert_close(apply_rotary(k, cos, sin, "half"), k_hf)


def _hf_image_ids(before: int, height: int, width: int, after: int) -> torch.Tensor:
    """Qwen2-VL's `get_rope_index` for one row: `before` text tokens (the last a vision-start one), an image of
    height x width patches (no spatial merge), `after` text tokens -> (3, T)."""
    image, start, text = 7, 6, 1
    ids = torch.tensor([[text] * (before - 1) + [start] + [image] * (height * width) + [text] * after])
    config = SimpleNamespace(
        vision_config=SimpleNamespace(spatial_merge_size=1),
        image_token_id=image,
        video_token_id=99,
        vision_start_token_id=start,
    )
    model = modeling_qwen2_vl.Qwen2VLModel
    grid = torch.tensor([[1, height, width]])
    if "mm_token_type_ids" in inspect.signature(model.get_rope_index).parameters:  # 5.x: modalities by type id
        vision = SimpleNamespace(
            config=config, get_vision_position_ids=lambda *a, **k: model.get_vision_position_ids(None, *a, **k)
        )
        types = torch.tensor([[0] * before + [1] * (height * width) + [0] * after])
        positions, _ = model.get_rope_index(vision, ids, types, image_grid_thw=grid)
    else:
        positions, _ = model.get_rope_index(SimpleNamespace(config=config), ids, grid)
    return positions[:, 0]


@pytest.mark.parametrize("before,height,width,after", [(1, 2, 3, 4), (5, 4, 4, 0), (3, 3, 2, 2)])
def test_text_around_an_image_gets_the_position_ids_of_get_rope_index(
    before: int, height: int, width: int, after: int
) -> None:
    torch.testing.assert_close(
        image_position_ids(before, height, width, after), _hf_image_ids(before, height, width, after)
    )
