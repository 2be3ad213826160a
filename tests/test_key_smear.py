"""Smeared keys (`Config.key_smear`, Olsson et al. 2022): one attention layer equals the formula written out with
plain tensor operations; a mix of 1 is the plain model; cached decoding, left padding, beam reordering and the
StreamingLLM cache stay exact; the export refuses what Hugging Face cannot represent."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.checkpoints.native import load_pretrained, save_pretrained
from posformer.hf.family import UnsupportedCheckpoint
from posformer.modules.cache import LayerCache
from posformer.ops.masks import build_mask
from tests.positions.test_positions_conformance import cached_left_padded_steps, config
from tests.positions.test_positions_streaming import streaming_model, token_by_token


def smeared(position: str = "rope", **changes) -> pf.Transformer:
    torch.manual_seed(0)
    model = pf.Transformer(config(position, "decoder", key_smear=True, **changes)).eval()
    with torch.no_grad():  # distinct mixes per head, away from the even mix at initialisation
        for layer in model.decoder.layers:
            layer.attn.key_smear.mix.copy_(torch.linspace(-2.0, 2.0, layer.attn.key_smear.mix.numel()))
    return model


@torch.no_grad()
def test_one_layer_equals_the_formula() -> None:
    """NoPE, so that the oracle is the smear and causal softmax attention alone:
    k'_j = s_h k_j + (1 - s_h) k_{j-1} with k_{-1} = 0 and s_h = sigmoid(mix_h), then softmax(q k'^T / sqrt(dh)) v."""
    attn = smeared("none", n_kv_heads=2).decoder.layers[0].attn
    x = torch.randn(2, 9, 32)
    q, k, v = attn.qkv(x).split((32, 16, 16), dim=-1)
    q, k, v = (t.unflatten(-1, (-1, 8)).transpose(1, 2) for t in (q, k, v))  # (B, heads, T, 8)
    share = torch.sigmoid(attn.key_smear.mix)[:, None, None]
    k = share * k + (1 - share) * torch.cat((torch.zeros_like(k[:, :, :1]), k[:, :, :-1]), 2)
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)  # GQA: two query heads per key head
    scores = q @ k.transpose(-1, -2) / 8**0.5 + torch.full((9, 9), float("-inf")).triu(1)
    expected = attn.out((scores.softmax(-1) @ v).transpose(1, 2).flatten(2))
    got, _ = attn(x, build_mask(None, True, 9, 9, x.dtype, x.device), torch.arange(9).expand(2, 9))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_a_mix_of_one_is_the_plain_model() -> None:
    model = smeared()
    plain = pf.Transformer(model.cfg.replace(key_smear=False)).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if "key_smear" not in k})
    ids = torch.randint(1, 53, (2, 12))
    assert (model(ids).logits - plain(ids).logits).abs().max() > 1e-3
    for layer in model.decoder.layers:
        layer.attn.key_smear.mix.fill_(float("inf"))
    torch.testing.assert_close(model(ids).logits, plain(ids).logits, atol=0, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("n_kv_heads", [4, 1])
def test_cached_decoding_of_a_left_padded_batch_equals_the_full_pass(n_kv_heads: int) -> None:
    model = smeared(n_kv_heads=n_kv_heads)
    ids = torch.randint(1, 53, (2, 14))
    mask = torch.tensor([[0] * 3 + [1] * 11, [1] * 14])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    full = model(ids, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(cached_left_padded_steps(model, ids, mask, pos, prefix=5), full, atol=1e-5, rtol=1e-5)
    alone = model(ids[:1, 3:]).logits  # the padded row on its own: its first real key has no predecessor
    torch.testing.assert_close(full[0, 3:], alone[0], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_decoding_with_the_streaming_cache_equals_the_full_pass() -> None:
    model = streaming_model(key_smear=True)
    ids = torch.randint(1, 53, (2, 40))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[0, :3] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    full = model(ids, attention_mask=mask, position_ids=pos).logits
    steps, held = token_by_token(model, ids, mask, pos, model.new_cache())
    real = mask.bool()
    torch.testing.assert_close(steps[real], full[real], atol=1e-5, rtol=1e-5)
    assert max(held) < 40  # keys were dropped, yet each new key still mixed in its true predecessor


def test_beam_reordering_moves_the_last_key_with_its_row() -> None:
    cache = LayerCache()
    k = torch.randn(3, 2, 4, 8)
    cache.append(k, k, torch.arange(4).expand(3, 4))
    cache.last_key = k[:, :, -1:]
    cache.reorder(torch.tensor([2, 2, 0]))
    torch.testing.assert_close(cache.last_key, k[[2, 2, 0], :, -1:])


@torch.no_grad()
def test_beam_search_over_the_cache_equals_rescoring_the_full_sequences() -> None:
    """Each returned beam's score is the sum of the full pass's log-probabilities of its tokens: the cache's last
    keys followed their rows through every reordering."""
    model = smeared()
    prompt = torch.randint(1, 53, (1, 5))
    out, scores = model.generate(
        prompt, max_new_tokens=6, num_beams=3, num_return_sequences=3, return_scores=True, length_penalty=0.0
    )
    logprobs = model(out).logits.log_softmax(-1)[:, 4:-1].gather(-1, out[:, 5:, None]).squeeze(-1).sum(-1)
    torch.testing.assert_close(scores, logprobs, atol=1e-4, rtol=1e-4)


def test_the_export_refuses_smeared_keys(tmp_path) -> None:
    model = pf.Transformer(config("rope", "decoder", key_smear=True, hf_model_type="llama", qkv_bias=False))
    with pytest.raises(UnsupportedCheckpoint, match="key_smear=True"):
        pf.to_hf(model, tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_saved_model_keeps_its_mixes(tmp_path) -> None:
    model = smeared()
    save_pretrained(model, tmp_path)
    loaded = load_pretrained(tmp_path)
    assert loaded.cfg.key_smear
    ids = torch.randint(1, 53, (1, 10))
    torch.testing.assert_close(loaded.eval()(ids).logits, model(ids).logits, atol=0, rtol=0)
