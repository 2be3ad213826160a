"""Gated attention (`Config.attention_output_gate`): one layer equals transformers' `Qwen3NextAttention` (4.57.6 and
5.x); a gate of a known constant c scales the ungated output by sigmoid(c), with RoPE and with ALiBi; cached decoding
of a left-padded batch equals the full pass for an encoding of each attention strategy; packed rows and documents
equal each alone; settings that cannot take a gate are refused by name."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3NextConfig
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention, Qwen3NextRotaryEmbedding

import posformer as pf
from posformer.ops.masks import build_mask
from tests.positions.test_positions_conformance import assert_sdpa_equals_eager, cached_left_padded_steps, config

LENGTH = 12


def _layer_inputs(batch: int = 2, length: int = LENGTH, width: int = 32) -> tuple:
    """x (B, T, width), a causal mask and the positions 0..T-1 of every row."""
    x = torch.randn(batch, length, width)
    return x, build_mask(None, True, length, length, x.dtype, x.device), torch.arange(length).expand(batch, length)


@torch.no_grad()
def test_a_gated_layer_equals_hf_qwen3_next_attention() -> None:
    """Qwen3-Next's full-attention layer: q_proj gives each head its query then its gate (head_dim each), per-head
    QK-norm with a unit offset (1 + weight), RoPE on half of each head (partial_rotary_factor 0.5), GQA."""
    hf_config = Qwen3NextConfig(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=100.0,
        partial_rotary_factor=0.5,
        num_hidden_layers=1,
        rms_norm_eps=1e-6,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    theirs = Qwen3NextAttention(hf_config, layer_idx=0).eval()
    for param in theirs.parameters():
        param.normal_(0.0, 0.3)
    cfg = pf.Config(
        arch="decoder",
        vocab_size=53,
        d_model=32,
        n_layers=1,
        n_heads=4,
        n_kv_heads=2,
        d_head=16,
        position="rope",
        position_params={"theta": 100.0, "rotary_fraction": 0.5, "layout": "half"},
        norm="rmsnorm_unit_offset",
        norm_eps=1e-6,
        qk_norm=True,
        qkv_bias=False,
        attn_out_bias=False,
        attention_output_gate=True,
    )
    ours = pf.Transformer(cfg).eval().decoder.layers[0].attn
    query_then_gate = theirs.q_proj.weight.view(4, 2, 16, 32)  # (heads, [query, gate], head_dim, hidden)
    q, gate = query_then_gate[:, 0].reshape(64, 32), query_then_gate[:, 1].reshape(64, 32)
    ours.qkv.weight.copy_(torch.cat([q, theirs.k_proj.weight, theirs.v_proj.weight, gate]))
    ours.q_norm.weight.copy_(theirs.q_norm.weight)
    ours.k_norm.weight.copy_(theirs.k_norm.weight)
    ours.out.weight.copy_(theirs.o_proj.weight)
    x, mask, pos = _layer_inputs()
    rotary = Qwen3NextRotaryEmbedding(hf_config)(x, pos)
    causal = torch.full((LENGTH, LENGTH), float("-inf")).triu(1)[None, None]
    expected, _ = theirs(x, position_embeddings=rotary, attention_mask=causal)
    got, _ = ours(x, mask, pos)
    assert (got - expected).abs().max() <= 1e-4


def _gated_and_plain(position: str, **changes) -> tuple[torch.nn.Module, torch.nn.Module]:
    """One attention layer with a gate and one without, with the same q, k, v and output weights."""
    fields = dict(n_layers=1, n_kv_heads=2, qkv_bias=True, attn_out_bias=False, **changes)
    torch.manual_seed(0)
    gated = pf.Transformer(config(position, "decoder", attention_output_gate=True, **fields)).eval()
    plain = pf.Transformer(config(position, "decoder", **fields)).eval()
    state = {k: v for k, v in gated.state_dict().items() if "qkv" not in k}
    plain.load_state_dict(state, strict=False)
    g, p = gated.decoder.layers[0].attn, plain.decoder.layers[0].attn
    with torch.no_grad():
        p.qkv.weight.copy_(g.qkv.weight[: p.qkv.weight.shape[0]])
        p.qkv.bias.copy_(g.qkv.bias[: p.qkv.bias.shape[0]])
    return g, p


@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize("c", [-2.0, 0.0, 3.0])
@torch.no_grad()
def test_a_constant_gate_scales_the_ungated_output_by_its_sigmoid(position: str, c: float) -> None:
    """Gate weights 0 and biases c: every gate is sigmoid(c) whatever the input, and the output projection is linear
    without a bias, so the gated layer gives sigmoid(c) times the ungated one."""
    gated, plain = _gated_and_plain(position)
    rows = plain.qkv.weight.shape[0]
    gated.qkv.weight[rows:] = 0.0
    gated.qkv.bias[rows:] = c
    x, mask, pos = _layer_inputs()
    expected = torch.sigmoid(torch.tensor(c)) * plain(x, mask, pos)[0]
    torch.testing.assert_close(gated(x, mask, pos)[0], expected, atol=1e-6, rtol=1e-6)


@torch.no_grad()
def test_each_head_is_gated_by_its_own_rows() -> None:
    """A gate of -inf on the rows of head 1 alone zeroes that head's output: the layer then equals the ungated one
    with head 1's columns of the output projection zeroed."""
    gated, plain = _gated_and_plain("rope")
    rows, head_dim = plain.qkv.weight.shape[0], plain.head_dim
    gated.qkv.weight[rows:] = 0.0
    gated.qkv.bias[rows:] = 1e4
    gated.qkv.bias[rows + head_dim : rows + 2 * head_dim] = -1e4
    plain.out.weight[:, head_dim : 2 * head_dim] = 0.0
    x, mask, pos = _layer_inputs()
    torch.testing.assert_close(gated(x, mask, pos)[0], plain(x, mask, pos)[0], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("position", ["rope", "alibi", "fox", "stick_breaking"])
def test_cached_decoding_of_a_left_padded_gated_model_equals_the_full_pass(position: str) -> None:
    """An encoding of each attention strategy: rotation, a bias, terms from the hidden states, its own weights."""
    torch.manual_seed(0)
    model = pf.Transformer(config(position, "decoder", n_kv_heads=2, attention_output_gate=True)).eval()
    ids = torch.randint(1, 53, (2, 14))
    mask = torch.tensor([[0] * 3 + [1] * 11, [1] * 14])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(ids, attention_mask=mask, position_ids=pos).logits
        steps = cached_left_padded_steps(model, ids, mask, pos, prefix=5)
        alone = model(ids[:1, 3:]).logits
    real = mask.bool()
    torch.testing.assert_close(steps[real], full[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(full[0, 3:], alone[0], atol=1e-5, rtol=1e-5)


def test_sdpa_equals_eager_with_a_gate() -> None:
    cfg = config("rope", "decoder", attention_output_gate=True)
    assert_sdpa_equals_eager(cfg, input_ids=torch.randint(1, 53, (2, 9)))


@torch.no_grad()
def test_packed_rows_and_documents_equal_each_alone() -> None:
    """An encoder's right-padded batch runs its real tokens only (`TokenPacking`); a decoder's packed documents
    attend within themselves: both give each row's or document's own outputs."""
    torch.manual_seed(0)
    encoder = pf.Transformer(config("rope", "encoder", attention_output_gate=True)).eval()
    ids = torch.randint(1, 53, (2, 9))
    mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4])
    padded = encoder(ids, attention_mask=mask).logits
    torch.testing.assert_close(padded[1, :5], encoder(ids[1:, :5]).logits[0], atol=1e-5, rtol=1e-5)
    decoder = pf.Transformer(config("rope", "decoder", attention_output_gate=True)).eval()
    documents = torch.tensor([[0] * 4 + [1] * 5])
    packed = decoder(ids[:1], document_ids=documents).logits
    torch.testing.assert_close(packed[0, 4:], decoder(ids[:1, 4:]).logits[0], atol=1e-5, rtol=1e-5)


def test_settings_that_cannot_take_a_gate_are_refused_by_name(tmp_path) -> None:
    latent = {"q_lora_rank": None, "kv_lora_rank": 16, "nope_dim": 8, "v_dim": 8}
    with pytest.raises(ValueError, match="Config.attention_output_gate=True is invalid"):
        config("rope", "decoder", d_head=8, latent_attention=latent, attention_output_gate=True)
    with pytest.raises(ValueError, match="Config.attention_output_gate"):
        config("rope", "decoder", attention_output_gate=1)
    cfg = config("rope", "decoder", norm="rmsnorm", activation="swiglu", attention_output_gate=True)
    for model_type, named in ((None, "llama"), ("llama", None)):  # the model's own family, or one named
        model = pf.Transformer(cfg.replace(hf_model_type=model_type))
        with pytest.raises(pf.hf.UnsupportedCheckpoint, match="attention_output_gate"):
            pf.to_hf(model, tmp_path, hf_model_type=named)
