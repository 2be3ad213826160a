"""Qwen3-VL's language model (`qwen3_vl_text`) against transformers 4.57.6 and 5.x: Qwen3's layers with interleaved
M-RoPE, given position ids with axes (3, B, T) of text around an image, and text ids (B, T); a round trip; greedy
generation equal to that of HF's Qwen3VLForConditionalGeneration (its text model alone has no head and no `generate`)
from text ids and from text around an image, where HF continues from its rope deltas; refusals by name."""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLTextConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel

import posformer as pf
from hf_oracle import assert_generates_hf_tokens, assert_same_outputs, check_family, padded_batch, round_trip, save_hf
from posformer.hf.family import UnsupportedCheckpoint

V5 = int(transformers.__version__.split(".")[0]) >= 5
SECTION = [2, 3, 3]  # head_dim 16: 8 pairs


VISION_START, IMAGE, VIDEO = 5, 6, 7  # token ids of the full model's config (generation)


def _text_sizes() -> dict:
    rope = {"rope_type": "default", "mrope_section": SECTION, "mrope_interleaved": True}
    kind = {"rope_parameters": {**rope, "rope_theta": 100.0}} if V5 else {"rope_scaling": rope, "rope_theta": 100.0}
    sizes = dict(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, initializer_range=0.2,
    )  # fmt: skip
    return {**sizes, **kind}


def _config(**changes) -> Qwen3VLTextConfig:
    return Qwen3VLTextConfig(**{**_text_sizes(), **changes}, attn_implementation="eager")


@torch.no_grad()
def _qwen3_vl_text(**changes) -> Qwen3VLTextModel:
    torch.manual_seed(0)
    hf = Qwen3VLTextModel(_config(**changes)).eval()
    for name, param in hf.named_parameters():  # HF starts norm weights at one: make them show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    return hf


def _image_batch() -> dict:
    """Two rows of 3 text tokens, a 2 x 3 image and 3 text tokens, the second left-padded by 2 (pads hold ids 0):
    ids, mask and position ids with axes (3, 2, 12), each row's counted from its first real token."""
    real = pf.positions.image_position_ids(3, 2, 3, 3)  # (3, 12)
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    pos = torch.stack([real, torch.cat([real.new_ones(3, 2), real[:, :10]], dim=1)], dim=1)
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask, "position_ids": pos}


def test_against_hf_qwen3_vl_text_with_image_position_ids(tmp_path):
    hf = _qwen3_vl_text()
    model = pf.from_hf(save_hf(hf, tmp_path / "hf"))
    assert model.cfg.position_params["mrope_section"] == SECTION and model.cfg.position_params["mrope_interleaved"]
    batch = _image_batch()
    assert_same_outputs(model, hf, batch, "last_hidden_state")
    assert_same_outputs(model, round_trip(model, Qwen3VLTextModel, tmp_path / "rt"), batch, "last_hidden_state")


def test_against_hf_qwen3_vl_text_with_text_ids(tmp_path):
    check_family(_qwen3_vl_text(attention_bias=True), Qwen3VLTextModel, tmp_path, padded_batch(97), "last_hidden_state")


def test_the_default_section_is_transformers_default(tmp_path):
    """A config without mrope_section gets [24, 20, 20] as transformers gives it (heads of 128)."""
    rope = {"rope_type": "default"}
    kind = {"rope_parameters": {**rope, "rope_theta": 100.0}} if V5 else {"rope_scaling": rope, "rope_theta": 100.0}
    hf = _qwen3_vl_text(head_dim=128, **kind)
    model = pf.from_hf(save_hf(hf, tmp_path / "hf"))
    assert model.cfg.position_params["mrope_section"] == [24, 20, 20]
    assert_same_outputs(model, hf, _image_batch(), "last_hidden_state")


def test_a_section_that_does_not_fit_the_heads_is_refused_by_name(tmp_path):
    hf = _qwen3_vl_text()
    directory = save_hf(hf, tmp_path / "hf")
    config = (directory / "config.json").read_text().replace("[\n      2,\n      3,\n      3\n    ]", "[4, 4, 4]")
    (directory / "config.json").write_text(config)
    with pytest.raises(UnsupportedCheckpoint, match=r"qwen3_vl_text.*mrope_section"):
        pf.from_hf(directory)


def test_to_hf_refuses_what_qwen3_vl_text_cannot_hold(tmp_path):
    model = pf.from_hf(save_hf(_qwen3_vl_text(), tmp_path / "hf"))
    plain = model.cfg.replace(position_params={"theta": 100.0})
    with pytest.raises(UnsupportedCheckpoint, match="mrope_section"):
        pf.to_hf(pf.Transformer(plain), tmp_path / "plain")
    with pytest.raises(UnsupportedCheckpoint, match="head 'causal_lm'"):
        pf.to_hf(pf.Transformer(model.cfg.replace(head="causal_lm")), tmp_path / "head")
    with pytest.raises(UnsupportedCheckpoint, match="sliding_window=4"):  # Qwen3-VL's text layers have none
        pf.to_hf(pf.Transformer(model.cfg.replace(sliding_window=4)), tmp_path / "window")
    llama = pf.Config.preset("llama", vocab_size=97, d_model=64, n_layers=1, n_heads=4)
    llama = llama.replace(position_params={"mrope_section": [2, 3, 3]})
    with pytest.raises(UnsupportedCheckpoint, match="no multi-axis RoPE"):
        pf.to_hf(pf.Transformer(llama), tmp_path / "llama")


@torch.no_grad()
def _qwen3_vl_with_head(tmp_path) -> tuple[Qwen3VLForConditionalGeneration, pf.Transformer]:
    """HF's full Qwen3-VL (a one-block vision tower it never runs here, an untied LM head) and posformer's model of
    its text model (`pf.from_hf` of the saved Qwen3VLTextModel) with a causal-LM head holding HF's lm_head."""
    vision = dict(
        depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=64, spatial_merge_size=2,
        deepstack_visual_indexes=[0], patch_size=2, temporal_patch_size=1,
    )  # fmt: skip
    config = Qwen3VLConfig(
        text_config=_text_sizes(), vision_config=vision, image_token_id=IMAGE, video_token_id=VIDEO,
        vision_start_token_id=VISION_START, vision_end_token_id=8, tie_word_embeddings=False,
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = Qwen3VLForConditionalGeneration(config).eval()
    for name, param in hf.named_parameters():
        if "norm" in name:
            param.normal_(1.0, 0.5)
    text = pf.from_hf(save_hf(hf.model.language_model, tmp_path / "text"))
    model = pf.Transformer(text.cfg.replace(head="causal_lm", tie_embeddings=False)).eval()
    missing = model.load_state_dict(text.state_dict(), strict=False).missing_keys
    assert missing == ["head.proj.weight"], missing
    model.head.proj.weight.copy_(hf.lm_head.weight)
    return hf, model


def test_qwen3_vl_text_generates_hf_tokens_from_text_ids(tmp_path):
    """A full and a left-padded prompt: HF's positions count real tokens on all three axes alike."""
    hf, model = _qwen3_vl_with_head(tmp_path)
    assert_generates_hf_tokens(model, hf, 97, lengths=(11,))


def test_qwen3_vl_text_generates_hf_tokens_after_an_image(tmp_path):
    """Two rows of 2 text tokens, a vision-start token, a 2 x 3 image of placeholder tokens (a grid of 4 x 6
    patches, merged 2 x 2) and 3 text tokens, the second left-padded by 2. HF (no pixels: the placeholders stay
    token embeddings) builds the position ids with axes itself (`get_rope_index`) and decodes from its rope deltas:
    the largest position + 1 on every axis. posformer, given `image_position_ids` for the prompt, decodes the same
    tokens; and the axes matter: the same prompt as text ids decodes others."""
    hf, model = _qwen3_vl_with_head(tmp_path)
    ids = torch.randint(VIDEO + 2, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    ids[:, 2], ids[:, 3:9] = VISION_START, IMAGE
    ids[1] = torch.cat([ids.new_zeros(2), ids[0, :10]])
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    real = pf.positions.image_position_ids(3, 2, 3, 3)  # (3, 12)
    position_ids = torch.stack([real, torch.cat([real.new_ones(3, 2), real[:, :10]], dim=1)], dim=1)
    image = {"image_grid_thw": torch.tensor([[1, 4, 6], [1, 4, 6]])}
    if V5:  # transformers 5 finds the image tokens by their type ids
        image["mm_token_type_ids"] = (ids == IMAGE).int()
    expected = hf.generate(
        input_ids=ids, attention_mask=mask, **image, max_new_tokens=8, do_sample=False, eos_token_id=None,
        pad_token_id=0,
    )  # fmt: skip
    ours = model.generate(ids, attention_mask=mask, position_ids=position_ids, max_new_tokens=8, eos_token_id=[])
    assert torch.equal(ours, expected)
    as_text = model.generate(ids, attention_mask=mask, max_new_tokens=8, eos_token_id=[])
    assert not torch.equal(as_text[:, 12:], expected[:, 12:])
