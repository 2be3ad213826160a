"""RoPE and xPos in KV-cached decoding: the cache equals a full pass for every scaling, and dynamic NTK,
whose frequencies follow each forward's length, agrees with it below the original length only."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.positions import rope_inv_freq
from tests.conftest import tiny
from tests.positions.test_positions_rope import encoding, rotation_matrix
from tests.positions.test_positions_rope_scaling import LLAMA31


# ------------------------------------------------------------------------------- KV-cached decoding
def cached_logits(model: pf.Transformer, ids: torch.Tensor, prompt: int) -> torch.Tensor:
    cache = pf.Cache(model.cfg.n_layers)
    steps = [model(ids[:, :prompt], cache=cache).logits]
    for t in range(prompt, ids.shape[1]):
        steps.append(model(ids[:, t : t + 1], cache=cache).logits)
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize(
    "position, params",
    [
        ("rope", {"scaling": {"type": "linear", "factor": 4.0}}),
        ("rope", {"scaling": {"type": "ntk", "factor": 4.0}, "layout": "interleaved"}),
        ("rope", {"scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4}}),
        ("rope", {"scaling": {**LLAMA31, "original_max_position_embeddings": 8}, "rotary_fraction": 0.5}),
        ("rope", {"scaling": {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 11}}),
        ("xpos", {}),
        ("xpos", {"layout": "half", "scale_base": 4.0}),
    ],
    ids=["linear", "ntk", "yarn", "llama3", "dynamic", "xpos", "xpos-half"],
)
def test_kv_cache_equals_full_pass(position: str, params: dict) -> None:
    """For "dynamic" only while the whole sequence stays within original_max_position_embeddings (11 here)."""
    cfg = tiny("decoder", position=position, position_params=params, n_kv_heads=2, init_std=0.3)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 11))
    torch.testing.assert_close(cached_logits(model, ids, 4), model(ids).logits, rtol=1e-5, atol=1e-5)


def test_dynamic_cache_agrees_below_the_original_length_only() -> None:
    """Dynamic NTK recomputes the frequencies per forward from its largest position (as Hugging Face does).
    A cached step rotates its new key with the frequencies of its own length and keeps the older keys as
    they were rotated; a full pass rotates every key with the frequencies of the whole length. So the
    two agree while the length is <= original_max_position_embeddings (6) and legitimately differ after."""
    scaling = {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 6}
    cfg = tiny("decoder", position="rope", position_params={"scaling": scaling}, init_std=0.3)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 11))
    cached = cached_logits(model, ids, 3)
    torch.testing.assert_close(cached[:, :6], model(ids[:, :6]).logits, rtol=1e-5, atol=1e-5)
    full = model(ids).logits
    assert not torch.allclose(cached[:, 6:], full[:, 6:], rtol=1e-3, atol=1e-3)
    assert not torch.allclose(full[:, :6], model(ids[:, :6]).logits, rtol=1e-3, atol=1e-3)
    # within the original length dynamic NTK is plain RoPE
    unscaled = pf.Transformer(cfg.replace(position_params={})).eval()
    unscaled.load_state_dict(model.state_dict())
    torch.testing.assert_close(cached[:, :6], unscaled(ids[:, :6]).logits, rtol=1e-5, atol=1e-5)


def test_dynamic_rotates_with_the_frequencies_of_the_forward_length() -> None:
    scaling = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    enc = encoding(layout="half", scaling=scaling).double()
    q = torch.randn(1, 2, 3, 8, dtype=torch.float64)
    pos = torch.tensor([[0, 5, 19]])
    rotated, _ = enc.rotate(q, q, pos, pos, 0)
    inv_freq = rope_inv_freq(8, 10000.0, scaling, seq_len=20)[0]
    assert not torch.equal(inv_freq, rope_inv_freq(8)[0])
    for t, m in enumerate([0, 5, 19]):
        torch.testing.assert_close(rotated[0, :, t], q[0, :, t] @ rotation_matrix(inv_freq, m, "half", 8).T)
    short = torch.tensor([[0, 5, 7]])  # length 8 <= 8: unscaled
    rotated, _ = enc.rotate(q, q, short, short, 0)
    torch.testing.assert_close(rotated[0, :, 2], q[0, :, 2] @ rotation_matrix(rope_inv_freq(8)[0], 7, "half", 8).T)
