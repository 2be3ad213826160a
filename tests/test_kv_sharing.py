"""KV sharing (`Config.kv_sources`), per-layer inputs (`Config.per_layer_inputs`), layer scalars, the value norm and
the logit soft cap: decoding over the KV cache gives the logits of one full pass, activation checkpointing the
gradients of a plain backward, the soft cap bounds the logits and its loss is their cross-entropy; bad settings
are refused by name. Their parity with Hugging Face's Gemma 4 is tests/hf/test_hf_gemma4.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import posformer as pf
from posformer.modules.cache import Cache

LAYERS = ["local", "full_attention", "local", "full_attention", "local_shared", "full_shared"]
LOCAL = {"sliding_window": 4, "d_head": 8, "position_params": {"theta": 100.0}}


def _config(**changes) -> pf.Config:
    fields = dict(
        arch="decoder",
        vocab_size=61,
        d_model=32,
        n_layers=6,
        n_heads=4,
        n_kv_heads=2,
        d_head=16,
        d_ff=24,
        position="rope",
        position_params={"theta": 1e4, "frequency_fraction": 0.5},
        norm="rmsnorm",
        norm_placement="sandwich",
        activation="geglu_tanh",
        attn_scale=1.0,
        qk_norm=True,
        value_norm=True,
        scale_embeddings=True,
        per_layer_inputs={"dim": 8},
        layer_scalars=True,
        logit_softcap=3.0,
        layer_types=LAYERS,
        layer_settings={"local": LOCAL, "local_shared": {**LOCAL, "d_ff": 48}, "full_shared": {"d_ff": 48}},
        kv_sources=[None, None, None, None, 2, 3],
        init_std=0.2,
    )
    return pf.Config(**{**fields, **changes})


def _model(**changes) -> pf.Transformer:
    torch.manual_seed(0)
    model = pf.Transformer(_config(**changes)).eval()
    with torch.no_grad():
        for block in model.decoder.layers:
            block.layer_scalar.uniform_(0.5, 1.5)
    return model


@torch.no_grad()
def test_cached_decoding_equals_one_pass_with_left_padding():
    """In float64, where the two orders of summation agree to rounding (float32 differs by ~1e-5 here)."""
    model = _model().double()
    ids = torch.randint(1, 61, (2, 14), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    full = model(ids, attention_mask=mask).logits
    cache = Cache(len(model.decoder.layers))
    steps = [model(ids[:, :6], attention_mask=mask[:, :6], cache=cache).logits]
    for t in range(6, 14):
        steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache).logits)
    keep = mask.bool()
    torch.testing.assert_close(torch.cat(steps, dim=1)[keep], full[keep], rtol=0, atol=1e-12)
    assert [len(layer) for layer in cache.self_attn] == [14] * 4 + [0, 0]  # the readers cache nothing


def test_a_reading_layer_has_no_key_or_value_projection():
    model = _model()
    sizes = [block.attn.qkv_sizes for block in model.decoder.layers]
    assert sizes == [(32, 16, 16), (64, 32, 32)] * 2 + [(32, 0, 0), (64, 0, 0)]
    assert model.decoder.layers[4].attn.k_norm is None and model.decoder.layers[4].attn.v_norm is None


def test_activation_checkpointing_gives_the_same_gradients():
    ids = torch.randint(0, 61, (2, 10), generator=torch.Generator().manual_seed(2))
    grads = []
    for checkpointed in (False, True):
        model = _model().train()
        model.set_activation_checkpointing(checkpointed)
        model(ids, labels=ids).loss.backward()
        grads.append({name: p.grad for name, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=0, atol=1e-6, msg=name)


@torch.no_grad()
def test_soft_capped_logits_are_bounded_and_their_loss_is_their_cross_entropy():
    model = _model()
    ids = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(3))
    out = model(ids, labels=ids)
    assert out.logits.abs().max() < 3.0
    expected = F.cross_entropy(out.logits[:, :-1].reshape(-1, 61), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(model(ids, labels=ids, return_logits=False).loss, expected)


def test_ids_outside_a_smaller_per_layer_table_are_refused():
    model = _model(per_layer_inputs={"dim": 8, "vocab_size": 40})
    with pytest.raises(ValueError, match=r"per-layer table"):
        model(torch.tensor([[1, 50]]))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kv_sources": [None, None, None, None, 5, 3]}, r"kv_sources\[4\]"),
        ({"kv_sources": [None, None, None, None, 2, 4]}, r"kv_sources\[5\]"),
        ({"kv_sources": [None, None, None, None, 1, 3]}, r"kv_sources\[4\].*same position_params"),
        ({"kv_sources": [None] * 5}, r"kv_sources"),
        ({"kv_sources": [None, None, None, None, 2, 3], "key_smear": True}, r"key_smear"),
        ({"position": "fox", "position_params": {}, "layer_settings": {}, "layer_types": None}, r"kv_sources.*fox"),
        ({"per_layer_inputs": {"width": 8}}, r"per_layer_inputs"),
        ({"per_layer_inputs": {"dim": 0}}, r"per_layer_inputs\['dim'\]"),
        ({"logit_softcap": 0.0}, r"logit_softcap"),
    ],
)
def test_bad_settings_are_refused_by_name(changes, field):
    with pytest.raises(ValueError, match=field):
        _config(**changes)


def test_a_family_without_these_settings_refuses_to_export_them(tmp_path):
    model = _model(hf_model_type="llama")
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="kv_sources"):
        pf.to_hf(model, tmp_path)
