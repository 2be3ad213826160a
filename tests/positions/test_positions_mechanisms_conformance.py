"""The 2025-2026 mechanisms over every registered decoder encoding: a stack of one gated DeltaNet layer and one
gated-attention layer with the encoding, chunked (iRoPE's local layers) where the encoding allows it. Cached
decoding of a left-padded batch equals one full pass, and a padded row equals itself alone, so a new encoding is
proven with them the moment it is registered."""

from __future__ import annotations

import pytest
import torch
from test_positions_conformance import cached_left_padded_steps

import posformer as pf

ENCODINGS = pf.positions.usable("decoder")


def hybrid(position: str) -> pf.Config:
    """Layer 0 a gated DeltaNet layer; layer 1 attention with the encoding, an output gate and chunks of 5 tokens."""
    return pf.Config(
        arch="decoder", vocab_size=53, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, position=position,
        max_positions=16, init_std=0.3, attention_output_gate=True, layer_types=["linear", "full"],
        layer_settings={"linear": {"mixer": "gated_deltanet"}, "full": {"attention_chunk": 5}},
        gated_deltanet={"chunk_size": 4},
    )  # fmt: skip


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_deltanet_and_gated_chunked_attention_stack_decodes_as_one_full_pass(name: str) -> None:
    torch.manual_seed(0)
    model = pf.Transformer(hybrid(name)).eval()
    ids = torch.randint(1, 53, (2, 11))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    full = model(ids, attention_mask=mask, position_ids=pos).logits
    steps = cached_left_padded_steps(model, ids, mask, pos, prefix=4)
    keep = mask.bool()
    torch.testing.assert_close(steps[keep], full[keep], atol=1e-5, rtol=1e-5)
    alone = model(ids[1:, 3:], position_ids=pos[1:, 3:]).logits
    torch.testing.assert_close(full[1, 3:], alone[0], atol=1e-5, rtol=1e-5)
