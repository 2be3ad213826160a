"""Attention: SDPA equals eager, KV-cached decoding equals the full pass, masks do what they say."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.ops.masks import build_mask
from tests.conftest import tiny

ARCHS = ["encoder", "decoder", "encoder_decoder"]


def run_both(cfg: pf.Config, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of the same weights under attn_impl sdpa and eager."""
    sdpa = pf.Transformer(cfg).eval()
    eager = pf.Transformer(cfg.replace(attn_impl="eager")).eval()
    eager.load_state_dict(sdpa.state_dict())
    return sdpa(**inputs).logits, eager(**inputs).logits


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_sdpa_equals_eager(arch: str, kv_heads: int) -> None:
    cfg = tiny(arch, n_kv_heads=kv_heads, position="rope")
    ids = torch.randint(0, cfg.vocab_size, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    mask[1, -2:] = 0
    kwargs = dict(input_ids=ids, attention_mask=mask)
    if arch == "encoder_decoder":
        kwargs["decoder_input_ids"] = torch.randint(0, cfg.vocab_size, (3, 5))
    a, b = run_both(cfg, **kwargs)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_causal_mask_of_length_5_is_lower_triangular() -> None:
    mask = build_mask(None, True, 5, 5, torch.float32, torch.device("cpu"))
    allowed = mask.materialized(5, 5, torch.float32, torch.device("cpu"))[0, 0] == 0
    assert torch.equal(allowed, torch.tril(torch.ones(5, 5, dtype=torch.bool)))
    cfg = tiny("decoder", n_layers=1, attn_impl="eager")
    out = pf.Transformer(cfg)(torch.randint(0, cfg.vocab_size, (1, 5)), output_attentions=True)
    weights = out.attentions[0][0]  # (H, 5, 5)
    assert torch.equal(weights != 0, torch.tril(torch.ones(5, 5, dtype=torch.bool)).expand_as(weights))


def test_future_tokens_do_not_change_the_past() -> None:
    cfg = tiny("decoder")
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 10))
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % cfg.vocab_size
    torch.testing.assert_close(model(ids).logits[:, :6], model(changed).logits[:, :6])


def test_key_padding_hides_padded_keys() -> None:
    cfg = tiny("encoder")
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(1, cfg.vocab_size, (1, 8))
    mask = torch.tensor([[1] * 5 + [0] * 3])
    other = ids.clone()
    other[:, 5:] = 0
    a = model(ids, attention_mask=mask).logits[:, :5]
    b = model(other, attention_mask=mask).logits[:, :5]
    alone = model(ids[:, :5]).logits
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, alone, atol=1e-5, rtol=1e-5)


def test_generate_with_cache_equals_recomputation() -> None:
    cfg = tiny("decoder", position="rope")
    model = pf.Transformer(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size, (2, 4))
    tokens = model.generate(prompt, max_new_tokens=6)
    expected = prompt
    for _ in range(6):
        expected = torch.cat((expected, model(expected).logits[:, -1].argmax(-1, keepdim=True)), 1)
    assert torch.equal(tokens, expected)


def test_generate_left_padded_batch_matches_single_rows() -> None:
    cfg = tiny("decoder", position="rope")
    model = pf.Transformer(cfg).eval()
    a = torch.randint(1, cfg.vocab_size, (1, 3))
    b = torch.randint(1, cfg.vocab_size, (1, 6))
    batch = torch.cat((torch.cat((torch.zeros(1, 3, dtype=torch.long), a), 1), b))
    mask = torch.tensor([[0] * 3 + [1] * 3, [1] * 6])
    out = model.generate(batch, max_new_tokens=5, attention_mask=mask)
    assert torch.equal(out[0, 3:], model.generate(a, max_new_tokens=5)[0])
    assert torch.equal(out[1], model.generate(b, max_new_tokens=5)[0])


def test_encoder_decoder_generate_equals_recomputation() -> None:
    cfg = tiny("encoder_decoder", position="sinusoidal")
    model = pf.Transformer(cfg).eval()
    src = torch.randint(0, cfg.vocab_size, (2, 5))
    out = model.generate(src, max_new_tokens=4)
    tgt = torch.zeros(2, 1, dtype=torch.long)
    for _ in range(4):
        tgt = torch.cat((tgt, model(src, decoder_input_ids=tgt).logits[:, -1].argmax(-1, keepdim=True)), 1)
    assert torch.equal(out, tgt)


def test_each_layer_holds_its_stack_encoding_without_registering_it() -> None:
    """The stack owns the encoding: one copy in the state dict and in parameters(); layers only point to it."""
    model = pf.Transformer(tiny("encoder_decoder", position="t5"))
    for stack in (model.encoder, model.decoder):
        for i, block in enumerate(stack.layers):
            assert block.attn.position is stack.position and block.attn.layer == i
    names = [name for name, _ in model.named_parameters(remove_duplicate=False)]
    assert [n for n in names if ".position." in n] == ["encoder.position.table.weight", "decoder.position.table.weight"]
    assert not any("attn.position" in key for key in model.state_dict())


def test_moving_the_model_moves_the_encoding_every_layer_uses() -> None:
    cfg = tiny("decoder", position="t5", init_std=0.3)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 7))
    expected = model(ids).logits.double()
    model.double()
    assert all(block.attn.position.table.weight.dtype == torch.float64 for block in model.decoder.layers)
    torch.testing.assert_close(model(ids).logits, expected, atol=1e-5, rtol=1e-5)


def test_cross_attention_is_plain_scaled_dot_product_attention() -> None:
    """No position hook in cross-attention, even in a stack with T5 buckets: its probabilities are
    softmax(scale * q.k) of its own projections (Vaswani et al. 2017, eq. 1)."""
    cfg = tiny("encoder_decoder", position="t5", init_std=0.3)
    model = pf.Transformer(cfg).eval()
    cross = model.decoder.layers[0].cross_attn
    x, memory = torch.randn(2, 3, cfg.d_model), torch.randn(2, 5, cfg.d_model)
    mask = build_mask(None, False, 3, 5, torch.float32, torch.device("cpu"))
    out, probs = cross(x, memory, mask, need_weights=True)
    q = cross.q(x).unflatten(-1, (cfg.n_heads, cfg.head_dim)).transpose(1, 2)
    k, v = cross.kv(memory).unflatten(-1, (2 * cfg.n_heads, cfg.head_dim)).transpose(1, 2).chunk(2, dim=1)
    reference = torch.softmax(q @ k.transpose(-1, -2) * cfg.scale, dim=-1)
    torch.testing.assert_close(probs, reference)
    torch.testing.assert_close(out, cross.out((reference @ v).transpose(1, 2).flatten(2)))


@pytest.mark.parametrize("name", [n for n in pf.positions.names() if pf.positions.get(n).sdpa_compatible])
def test_sdpa_gets_every_encodings_bias_with_contiguous_keys(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SDPA's fused CUDA kernels take a mask only with stride 1 over the keys: with any other layout (a permuted
    (B, T, S, H) bias) they fall back to the unfused math kernel."""
    import posformer.modules.attend as attention

    masks: list[torch.Tensor] = []
    sdpa = attention.F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, **kwargs):
        if attn_mask is not None:
            masks.append(attn_mask)
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", recording)
    for arch in [arch for arch in ("decoder", "encoder") if name in pf.positions.usable(arch)]:
        model = pf.Transformer(tiny(arch, position=name))
        model(
            input_ids=torch.randint(0, model.cfg.vocab_size, (2, 9)),
            attention_mask=torch.tensor([[1] * 9, [0] * 2 + [1] * 7]),
        )
    assert masks and all(mask.stride(-1) == 1 for mask in masks)


def test_eager_attention_keeps_float64_probabilities() -> None:
    """In float64 the eager kernel's softmax runs in float64 (float32 or wider, never narrower than its input),
    so a float64 model is a float64 reference: its probabilities equal the formula to 1e-14."""
    from posformer.modules.attend import attend
    from posformer.ops.masks import AttentionMask

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 8, dtype=torch.float64, generator=generator) for _ in range(3))
    bias = torch.randn(1, 3, 7, 7, dtype=torch.float64, generator=generator)
    out, probs = attend(q, k, v, AttentionMask(), bias, scale=0.35, kernel="eager")
    expected = torch.softmax(0.35 * q @ k.transpose(-1, -2) + bias, dim=-1)
    assert probs.dtype == torch.float64
    torch.testing.assert_close(probs, expected, rtol=0, atol=1e-14)
    torch.testing.assert_close(out, expected @ v, rtol=0, atol=1e-14)
