"""Qwen3-VL's language model (`qwen3_vl_text`) against transformers 4.57.6 and 5.x: Qwen3's layers with interleaved
M-RoPE, given position ids with axes (3, B, T) of text around an image, and text ids (B, T); a round trip; refusals
by name."""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers import Qwen3VLTextConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel

import posformer as pf
from hf_oracle import assert_same_outputs, check_family, padded_batch, round_trip, save_hf
from posformer.hf.family import UnsupportedCheckpoint

V5 = int(transformers.__version__.split(".")[0]) >= 5
SECTION = [2, 3, 3]  # head_dim 16: 8 pairs


def _config(**changes) -> Qwen3VLTextConfig:
    rope = {"rope_type": "default", "mrope_section": SECTION, "mrope_interleaved": True}
    kind = {"rope_parameters": {**rope, "rope_theta": 100.0}} if V5 else {"rope_scaling": rope, "rope_theta": 100.0}
    sizes = dict(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, initializer_range=0.2,
    )  # fmt: skip
    return Qwen3VLTextConfig(**{**sizes, **kind, **changes}, attn_implementation="eager")


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
    llama = pf.Config.preset("llama", vocab_size=97, d_model=64, n_layers=1, n_heads=4)
    llama = llama.replace(position_params={"mrope_section": [2, 3, 3]})
    with pytest.raises(UnsupportedCheckpoint, match="no multi-axis RoPE"):
        pf.to_hf(pf.Transformer(llama), tmp_path / "llama")
