"""transformers 5.x's "proportional" RoPE (Gemma 4's global layers) against Hugging Face's own frequencies: a
config read by `from_hf` gives the inverse frequencies `ROPE_INIT_FUNCTIONS["proportional"]` computes, pair for
pair, and so differs from HF's `partial_rotary_factor` on default RoPE (docs/positions.md, p-RoPE). transformers
4.57.6 has no proportional RoPE: there the module is skipped (the hf5 suite runs it)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, PhiConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.phi.modeling_phi import PhiRotaryEmbedding

import posformer as pf
from posformer.hf.rope import rope_params

if "proportional" not in ROPE_INIT_FUNCTIONS:
    pytest.skip("this transformers has no proportional RoPE (5.x has)", allow_module_level=True)


def _hf_config(head_dim: int, rope: dict) -> LlamaConfig:
    return LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim, rope_parameters=rope)


def _ours(head_dim: int, rope: dict) -> torch.Tensor:
    """The inverse frequencies of posformer's encoding as `from_hf` reads `rope`: (head_dim / 2,)."""
    params = rope_params({"model_type": "llama", "max_position_embeddings": 4096, "rope_parameters": rope})
    sizes = pf.positions.Sizes(d_model=2 * head_dim, n_heads=2, head_dim=head_dim)
    return pf.positions.get("rope")(sizes, params).inv_freq


@pytest.mark.parametrize("head_dim", [32, 64, 256])
@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("factor", [1.0, 8.0])
def test_proportional_rope_gives_the_hf_inverse_frequencies(head_dim: int, fraction: float, factor: float) -> None:
    rope = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": fraction, "factor": factor}
    theirs, attention_factor = ROPE_INIT_FUNCTIONS["proportional"](_hf_config(head_dim, rope), "cpu")
    assert attention_factor == 1.0
    torch.testing.assert_close(_ours(head_dim, rope), theirs.float(), rtol=0, atol=0)


def test_proportional_rope_is_not_hf_partial_rotation() -> None:
    """The same partial_rotary_factor 0.25: proportional keeps head_dim as the frequencies' denominator over every
    pair (the others at 0); default RoPE's partial rotation (Phi's) rotates a quarter of the head with its own."""
    head_dim, theta = 64, 1e4
    proportional = {"rope_type": "proportional", "rope_theta": theta, "partial_rotary_factor": 0.25}
    partial = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 0.25}
    kept, _ = ROPE_INIT_FUNCTIONS["proportional"](_hf_config(head_dim, proportional), "cpu")
    phi = PhiConfig(hidden_size=2 * head_dim, num_attention_heads=2, rope_parameters=partial)
    quarter = PhiRotaryEmbedding(phi).inv_freq
    assert kept.shape == (head_dim // 2,) and quarter.shape == (head_dim // 8,)
    torch.testing.assert_close(_ours(head_dim, proportional), kept.float(), rtol=0, atol=0)
    torch.testing.assert_close(_ours(head_dim, partial), quarter.float(), rtol=0, atol=0)
    assert not torch.allclose(kept[: head_dim // 8], quarter)
