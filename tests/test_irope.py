"""Llama 4's iRoPE (`posformer.irope_layers`): the layer pattern it writes; a tiny Llama-4-style decoder built from it
equals transformers' Llama4ForCausalLM (4.57.6 and 5.x, dense layers, chunks of 8, the L2 QK-norm, the NoPE layer's
temperature of floor 4) on 20 left-padded tokens and in greedy generation; the L2 QK-norm makes the RoPE layers blind
to the scale of q and k; cached decoding of a left-padded batch equals the full pass; bad arguments are named."""

from __future__ import annotations

import pytest
import torch
from transformers import Llama4ForCausalLM, Llama4TextConfig

import posformer as pf
from hf_oracle import ORACLE, TOLERANCE, max_diff, padded_batch
from posformer.hf import llama4
from posformer.hf.mapping import import_state
from tests.positions.test_positions_conformance import cached_left_padded_steps

TEMPERATURE = {"scale": 0.5, "floor_size": 4}


def test_irope_layers_writes_llama4s_pattern() -> None:
    rope = {"attention_chunk": 8192, "qk_norm": True, "qk_norm_kind": "l2"}
    nope = {"position": "none", "attention_chunk": None, "query_temperature": {"scale": 0.1, "floor_size": 8192}}
    assert pf.irope_layers(8) == {
        "layer_types": ["rope", "rope", "rope", "nope"] * 2,
        "layer_settings": {"rope": rope, "nope": nope},
    }
    fields = pf.irope_layers(5, chunk=None, every=2, temperature=None, qk_norm=False)
    assert fields["layer_types"] == ["rope", "nope", "rope", "nope", "rope"]
    assert fields["layer_settings"]["rope"] == {"attention_chunk": None}
    assert fields["layer_settings"]["nope"]["query_temperature"] is None
    assert pf.irope_layers(3)["layer_settings"].keys() == {"rope"}  # no fourth layer: no NoPE layer


@pytest.mark.parametrize(
    "arguments, name",
    [
        ({"n_layers": 0}, "n_layers"),
        ({"every": 0}, "every"),
        ({"chunk": 0}, "chunk"),
        ({"temperature": {"scale": 0.1}}, "temperature"),
        ({"qk_norm": 1}, "qk_norm"),
    ],
)
def test_bad_arguments_are_named(arguments, name) -> None:
    with pytest.raises(ValueError, match=f"irope_layers: {name}="):
        pf.irope_layers(**{"n_layers": 4, **arguments})


def _irope_decoder(**changes) -> pf.Transformer:
    """Llama 4's layout (pre-RMSNorm, SwiGLU, GQA, no biases, RoPE on pairs (2i, 2i + 1)) with iRoPE layers."""
    torch.manual_seed(0)
    fields = dict(
        arch="decoder",
        vocab_size=97,
        d_model=32,
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        d_head=8,
        d_ff=40,
        position="rope",
        position_params={"theta": 100.0, "layout": "interleaved"},
        max_positions=64,
        norm="rmsnorm",
        activation="swiglu",
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        tie_embeddings=False,
        init_std=0.2,
        **pf.irope_layers(4, chunk=8, temperature=TEMPERATURE),
    )
    return pf.Transformer(pf.Config(**{**fields, **changes})).eval()


@torch.no_grad()
def _hf_llama4() -> Llama4ForCausalLM:
    """A dense Llama 4 (`moe_layers=[]`: every layer's feed-forward of `intermediate_size_mlp`)."""
    hf_config = Llama4TextConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=24,
        intermediate_size_mlp=40,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        rope_theta=100.0,
        moe_layers=[],
        attention_chunk_size=8,
        floor_scale=4,
        attn_scale=0.5,
        initializer_range=0.2,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = Llama4ForCausalLM(hf_config).eval()
    for name, param in hf.named_parameters():  # make a swapped norm weight show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    return hf


def test_an_irope_decoder_equals_hf_llama4() -> None:
    """HF's weights copied by name (the llama4_text family's weight rules alone): logits on 20 tokens, full,
    right- and left-padded, past the chunk of 8 and five temperature steps; greedy generation to 22 tokens."""
    hf, model = _hf_llama4(), _irope_decoder()
    import_state(model, llama4.rules(model.cfg), hf.state_dict(), "Llama4ForCausalLM")
    batch = padded_batch(97, length=20)
    with torch.no_grad():
        diff = max_diff(model(**batch).logits, hf(**batch).logits, batch["attention_mask"])
    assert diff <= TOLERANCE, f"max |diff| = {diff:.3g} against {ORACLE}"
    ids = batch["input_ids"][:2, :6]  # rows without padding: transformers' temperature reads the cache slot
    expected = hf.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(model.generate(ids, max_new_tokens=16, eos_token_id=[]), expected)


@torch.no_grad()
def test_the_l2_qk_norm_makes_the_rope_layers_blind_to_the_scale_of_q_and_k() -> None:
    """Scaling the query and key rows of every RoPE layer's projection by 5 changes no logit (eps 1e-12): the norm
    gives each head's q and k the length sqrt(head_dim) whatever they were; without it the same scaling does."""
    ids = torch.randint(0, 97, (2, 20))
    for qk_norm, moves in ((True, False), (False, True)):
        settings = pf.irope_layers(4, chunk=8, temperature=TEMPERATURE, qk_norm=qk_norm)["layer_settings"]
        model = _irope_decoder(norm_eps=1e-12, layer_settings=settings)
        before = model(ids).logits
        for block in model.decoder.layers[:3]:
            norm = block.attn.q_norm  # weightless: nothing for a checkpoint to hold
            assert (norm is not None) == qk_norm and (norm is None or not list(norm.parameters()))
            q_and_k = block.attn.q_dim + block.attn.kv_dim
            block.attn.qkv.weight[:q_and_k] *= 5.0
        assert model.decoder.layers[3].attn.q_norm is None  # the NoPE layer
        moved = (model(ids).logits - before).abs().max()
        assert (moved > 1e-3) if moves else (moved < 1e-4), (qk_norm, float(moved))


def test_cached_decoding_of_a_left_padded_irope_batch_equals_the_full_pass() -> None:
    model = _irope_decoder()
    ids = torch.randint(1, 97, (2, 22))
    mask = torch.tensor([[0] * 3 + [1] * 19, [1] * 22])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(ids, attention_mask=mask, position_ids=pos).logits
        steps = cached_left_padded_steps(model, ids, mask, pos, prefix=5)
    torch.testing.assert_close(steps[mask.bool()], full[mask.bool()], atol=1e-5, rtol=1e-5)
