"""Multi-head latent attention (`Config.latent_attention`): the config's checks, the compressed KV cache (the latent
and one rope key per token and layer), cached decoding (the absorbed form) equal to full passes (the expanded
form), the attention weights, packed tokens and a training step."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.modules.cache import LayerCache
from posformer.modules.latent_attention import LatentAttention
from posformer.ops.masks import build_mask
from posformer.ops.packing import TokenPacking
from tests.conftest import tiny

LATENT = {"q_lora_rank": 12, "kv_lora_rank": 16, "nope_dim": 8, "v_dim": 6}
TOLERANCE = 1e-5


def _cfg(**overrides) -> pf.Config:
    fields = dict(d_head=8, position="rope", norm="rmsnorm", activation="swiglu", latent_attention=LATENT)
    return tiny(**{**fields, **overrides})


def _batch(length: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of ids: a full one and a left-padded one (3 pads)."""
    ids = torch.randint(1, 61, (2, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    return ids.masked_fill(mask == 0, 0), mask


def test_config_resolves_the_query_rank_and_round_trips():
    cfg = _cfg(latent_attention={"kv_lora_rank": 16, "nope_dim": 8, "v_dim": 6})
    assert cfg.latent_attention == {"q_lora_rank": None, "kv_lora_rank": 16, "nope_dim": 8, "v_dim": 6}
    assert cfg.scale == (8 + 8) ** -0.5
    assert pf.Config.from_dict(cfg.to_dict()) == cfg
    assert isinstance(pf.Transformer(cfg).decoder.layers[0].attn, LatentAttention)


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"latent_attention": {"kv_lora_rank": 16, "nope_dim": 8}}, "'v_dim' is missing"),
        ({"latent_attention": {**LATENT, "rope_dim": 8}}, "latent_attention="),
        ({"latent_attention": {**LATENT, "kv_lora_rank": 0}}, r"latent_attention\['kv_lora_rank'\]=0"),
        ({"d_head": None}, "d_head=None"),
        ({"n_kv_heads": 2}, "n_kv_heads=2"),
        ({"position": "alibi"}, "position='alibi'"),
        ({"position": "xpos"}, "position='xpos'"),
        (
            {"layer_types": ["full_attention", "b"], "layer_settings": {"b": {"position": "alibi"}}},
            r"layer_settings\['b'\]: Config.position='alibi'",
        ),
        ({"qk_norm": True}, "qk_norm=True"),
        ({"attention_sinks": True}, "attention_sinks=True"),
        ({"init": "t5"}, "init='t5'"),
        ({"norm": "deepnorm", "norm_placement": "post"}, "norm='deepnorm'"),
    ],
)
def test_config_refuses_what_latent_attention_does_not_take_by_name(changes, match):
    with pytest.raises(ValueError, match=match):
        _cfg(**changes)


def test_config_refuses_latent_attention_outside_a_decoder():
    with pytest.raises(ValueError, match="arch='encoder'"):
        _cfg(arch="encoder", position="rope")


@pytest.mark.parametrize("q_lora_rank", [12, None])
def test_the_cache_holds_the_latent_and_one_rope_key_per_token(q_lora_rank):
    cfg = _cfg(latent_attention={**LATENT, "q_lora_rank": q_lora_rank})
    ids, mask = _batch()
    cache = pf.Transformer(cfg).eval()(ids, attention_mask=mask, use_cache=True).cache
    for layer in cache.self_attn:
        assert layer.k.shape == (2, 1, 10, 8) and layer.v.shape == (2, 1, 10, 16)
        per_token = sum(t.shape[1] * t.shape[3] for t in (layer.k, layer.v))
        assert per_token == LATENT["kv_lora_rank"] + cfg.head_dim  # 24, not 2 * 4 heads * 8 + ...


@pytest.mark.parametrize("q_lora_rank", [12, None])
@pytest.mark.parametrize("options", [{}, {"attn_impl": "eager"}, {"sliding_window": 4}], ids=lambda o: str(o))
@torch.no_grad()
def test_cached_decoding_equals_the_full_pass(q_lora_rank, options):
    """A prefix of 5 (the expanded form on an empty cache), then one token a step (the absorbed form)."""
    cfg = _cfg(latent_attention={**LATENT, "q_lora_rank": q_lora_rank}, **options)
    model = pf.Transformer(cfg).eval()
    ids, mask = _batch()
    full = model(ids, attention_mask=mask).logits
    out = model(ids[:, :5], attention_mask=mask[:, :5], use_cache=True)
    steps = [out.logits]
    for t in range(5, ids.shape[1]):
        steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=out.cache).logits)
    keep = mask.bool()
    assert float((torch.cat(steps, 1) - full).abs()[keep].max()) <= TOLERANCE


@torch.no_grad()
def test_greedy_generation_equals_greedy_full_passes():
    model = pf.Transformer(_cfg(position_params={"layout": "interleaved"})).eval()
    ids, mask = _batch(6)
    generated = model.generate(ids, attention_mask=mask, max_new_tokens=8, eos_token_id=[])
    for _ in range(8):
        step = model(ids, attention_mask=mask).logits[:, -1].argmax(-1, keepdim=True)
        ids, mask = torch.cat((ids, step), 1), torch.cat((mask, torch.ones_like(step)), 1)
    assert torch.equal(generated, ids)


@torch.no_grad()
def test_both_forms_return_the_same_attention_weights():
    model = pf.Transformer(_cfg()).eval()
    ids, mask = _batch()
    full = model(ids, attention_mask=mask, output_attentions=True).attentions
    out = model(ids[:, :9], attention_mask=mask[:, :9], use_cache=True)
    last = model(ids[:, 9:], attention_mask=mask, cache=out.cache, output_attentions=True).attentions
    for whole, step in zip(full, last):
        assert step.shape == (2, 4, 1, 10)
        assert torch.allclose(step, whole[:, :, 9:], atol=TOLERANCE)


@torch.no_grad()
def test_packed_tokens_equal_the_padded_batch():
    """The module takes the real tokens of a batch (N, d_model) as self-attention does."""
    cfg = _cfg()
    attn = pf.Transformer(cfg).eval().decoder.layers[0].attn
    x, (_, keep) = torch.randn(2, 10, cfg.d_model), _batch()
    keep, pos = keep.bool(), torch.arange(10).expand(2, 10)
    mask = build_mask(keep, True, 10, 10, x.dtype, x.device)
    padded, _ = attn(x, mask, pos)
    packing = TokenPacking.of(keep)
    packed, _ = attn(packing.pack(x), mask, pos, packing=packing)
    assert torch.allclose(packed, packing.pack(padded), atol=TOLERANCE)


def test_a_training_step_reaches_every_parameter():
    model = pf.Transformer(_cfg(attention_dropout=0.1)).train()
    ids, mask = _batch()
    model(ids, attention_mask=mask, labels=ids).loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def test_the_layer_cache_takes_keys_and_values_of_other_widths():
    cache = LayerCache()
    k, v, pos = torch.randn(2, 1, 3, 8), torch.randn(2, 1, 3, 16), torch.arange(3).expand(2, 3)
    got_k, got_v, _ = cache.append(k, v, pos)
    assert torch.equal(got_k, k) and torch.equal(got_v, v)
