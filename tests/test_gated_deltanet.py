"""Gated DeltaNet layers (`Config.mixer="gated_deltanet"`, `posformer.modules.gated_deltanet`): the chunked and the
recurrent form of the gated delta rule agree (`posformer.ops.gated_delta_rule`) and store what the delta rule
stores; in a Qwen3-Next-style hybrid stack (three DeltaNet layers to one attention layer, RoPE or ALiBi on the
attention layer) cached decoding, generation and beam search equal full passes, a left-padded row equals the row
alone, a training step lowers the loss; bad sizes and what the layer cannot do are refused by name. The layer
against transformers' Qwen3-Next and Qwen3.5 layers: tests/hf/test_hf_gated_deltanet.py."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.modules.cache import LayerCache
from posformer.modules.gated_deltanet import GatedDeltaNet
from posformer.ops.gated_delta_rule import CHUNKS_AT_ONCE, gated_delta_rule_chunked, gated_delta_rule_recurrent
from posformer.ops.masks import build_mask
from posformer.ops.packing import TokenPacking
from posformer.summary import parameters_by_component
from tests.conftest import tiny

HYBRID = dict(
    n_layers=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    layer_settings={"linear_attention": {"mixer": "gated_deltanet"}},
    gated_deltanet={"key_heads": 2, "value_heads": 4, "key_dim": 8, "value_dim": 6, "chunk_size": 4},
    norm="rmsnorm",
    activation="swiglu",
)
TOLERANCE = 1e-5


def hybrid(position: str = "rope", **changes) -> pf.Transformer:
    torch.manual_seed(0)
    return pf.Transformer(tiny(position=position, **{**HYBRID, **changes})).eval()


def rule_inputs(batch=2, heads=3, length=23, key_dim=8, value_dim=5, seed=0):
    """q, k (L2-normed keys), v, g <= 0, beta in (0, 1), and a state."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, length, key_dim, generator=g)
    k = torch.nn.functional.normalize(torch.randn(batch, heads, length, key_dim, generator=g), dim=-1)
    v = torch.randn(batch, heads, length, value_dim, generator=g)
    decay = -torch.rand(batch, heads, length, generator=g)
    beta = torch.rand(batch, heads, length, generator=g)
    state = torch.randn(batch, heads, key_dim, value_dim, generator=g)
    return q, k, v, decay, beta, state


def left_padded(length: int = 13, pads: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of ids: a full one and a left-padded one."""
    ids = torch.randint(1, 61, (2, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[1, :pads] = 0
    return ids.masked_fill(mask == 0, 0), mask


# ------------------------------------------------------------------------------------------------- the rule itself
@pytest.mark.parametrize("chunk_size", [1, 4, 7, 23, 64])
@pytest.mark.parametrize("with_state", [False, True])
def test_the_chunked_form_equals_the_recurrent_form(chunk_size, with_state):
    q, k, v, g, beta, state = rule_inputs()
    state = state if with_state else None
    out, final = gated_delta_rule_recurrent(q, k, v, g, beta, state)
    chunked, chunked_final = gated_delta_rule_chunked(q, k, v, g, beta, chunk_size, state)
    torch.testing.assert_close(chunked, out, atol=TOLERANCE, rtol=TOLERANCE)
    torch.testing.assert_close(chunked_final, final, atol=TOLERANCE, rtol=TOLERANCE)


def test_the_chunked_form_equals_the_recurrent_form_over_several_groups_of_chunks():
    """35 chunks of 3 tokens: three groups of CHUNKS_AT_ONCE chunks, which share one causal mask and identity."""
    assert CHUNKS_AT_ONCE < 35 // 2
    q, k, v, g, beta, state = rule_inputs(length=105, seed=2)
    out, final = gated_delta_rule_recurrent(q, k, v, g, beta, state)
    chunked, chunked_final = gated_delta_rule_chunked(q, k, v, g, beta, 3, state)
    torch.testing.assert_close(chunked, out, atol=TOLERANCE, rtol=TOLERANCE)
    torch.testing.assert_close(chunked_final, final, atol=TOLERANCE, rtol=TOLERANCE)


def test_the_chunked_form_carries_its_state_from_one_call_to_the_next():
    q, k, v, g, beta, _ = rule_inputs(length=30)
    whole, whole_final = gated_delta_rule_chunked(q, k, v, g, beta, 8)
    first, state = gated_delta_rule_chunked(q[:, :, :13], k[:, :, :13], v[:, :, :13], g[:, :, :13], beta[:, :, :13], 8)
    rest, final = gated_delta_rule_chunked(
        q[:, :, 13:], k[:, :, 13:], v[:, :, 13:], g[:, :, 13:], beta[:, :, 13:], 8, state
    )
    torch.testing.assert_close(torch.cat((first, rest), dim=2), whole, atol=TOLERANCE, rtol=TOLERANCE)
    torch.testing.assert_close(final, whole_final, atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_the_delta_rule_overwrites_what_a_key_recalls(form):
    """With beta = 1 and no decay, writing v for a unit key k makes the state recall exactly v for k, and a second
    write for the same key replaces the first (linear attention would recall their sum): the delta rule's defining
    property (Widrow and Hoff's rule, Schlag et al. 2021)."""
    key_dim, value_dim = 4, 3
    keys = torch.eye(key_dim)[[0, 1, 0, 2]]  # key 0 written twice
    values = torch.randn(4, value_dim, generator=torch.Generator().manual_seed(1))
    k = keys[None, None]
    q = k.clone()  # each token reads back its own key
    ones, zeros = torch.ones(1, 1, 4), torch.zeros(1, 1, 4)
    args = (q, k, values[None, None], zeros, ones)
    out, state = (
        gated_delta_rule_recurrent(*args, scale=1.0)
        if form == "recurrent"
        else gated_delta_rule_chunked(*args, chunk_size=3, scale=1.0)
    )
    torch.testing.assert_close(out[0, 0], values, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(state[0, 0, 0], values[2], atol=1e-6, rtol=1e-6)  # key 0 recalls its last value
    torch.testing.assert_close(state[0, 0, 3], torch.zeros(value_dim))  # an unwritten key recalls nothing


def test_a_decay_of_g_scales_the_state_by_exp_g_before_the_write():
    """A token with beta = 0 only decays the state: S_t = exp(g_t) S_{t-1}, read by q as scale * S_t^T q."""
    q, k, v, _, _, state = rule_inputs(batch=1, heads=1, length=1)
    g = torch.full((1, 1, 1), -0.7)
    out, final = gated_delta_rule_recurrent(q, k, v, g, torch.zeros(1, 1, 1), state)
    torch.testing.assert_close(final, state * torch.exp(torch.tensor(-0.7)))
    torch.testing.assert_close(out[0, 0, 0], final[0, 0].T @ q[0, 0, 0] * 8**-0.5)


@pytest.mark.parametrize("chunk_size", [0, -1, 2.5, True])
def test_the_rule_refuses_a_chunk_size_by_name(chunk_size):
    q, k, v, g, beta, _ = rule_inputs(length=4)
    with pytest.raises(ValueError, match=r"chunk_size="):
        gated_delta_rule_chunked(q, k, v, g, beta, chunk_size)


def test_the_rule_refuses_mismatched_shapes_by_name():
    q, k, v, g, beta, _ = rule_inputs(length=4)
    with pytest.raises(ValueError, match=r"v.shape="):
        gated_delta_rule_recurrent(q, k, v[:, :, :3], g, beta)
    with pytest.raises(ValueError, match=r"beta.shape="):
        gated_delta_rule_chunked(q, k, v, g, beta[:, :1], 4)


# ------------------------------------------------------------------------------------------------------ the config
def test_the_config_resolves_the_sizes_and_round_trips(tmp_path):
    cfg = tiny(**{**HYBRID, "gated_deltanet": {"value_heads": 8}})
    assert cfg.gated_deltanet == {
        "key_heads": 4,
        "value_heads": 8,
        "key_dim": 8,
        "value_dim": 8,
        "conv_kernel": 4,
        "chunk_size": 64,
    }
    assert pf.Config.from_dict(cfg.to_dict()) == cfg
    model = pf.Transformer(cfg)
    kinds = [type(block.attn).__name__ for block in model.decoder.layers]
    assert kinds == ["GatedDeltaNet"] * 3 + ["SelfAttention"]
    layer = model.decoder.layers[0].attn
    assert parameters_by_component(model)["gated deltanet"] == 3 * sum(p.numel() for p in layer.parameters())
    model.save_pretrained(tmp_path)
    assert pf.Transformer.from_pretrained(tmp_path).cfg == cfg


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"gated_deltanet": {"chunk_size": 0}}, r"Config.gated_deltanet\['chunk_size'\]=0"),
        ({"gated_deltanet": {"key_heads": 2, "value_heads": 3}}, r"gated_deltanet\['value_heads'\]=3 .*multiple"),
        ({"gated_deltanet": {"conv_kernel": 0}}, r"gated_deltanet\['conv_kernel'\]=0"),
        ({"gated_deltanet": {"key_dim": -8}}, r"gated_deltanet\['key_dim'\]=-8"),
        ({"gated_deltanet": {"heads": 2}}, r"Config.gated_deltanet=\{'heads': 2\}"),
        ({"gated_deltanet": [4]}, r"Config.gated_deltanet=\[4\]"),
        ({"layer_settings": {"linear_attention": {"mixer": "mamba"}}}, r"Config.mixer='mamba'"),
        ({"arch": "encoder"}, r"layer_settings\['linear_attention'\]: Config.arch='encoder'"),
        ({"sliding_window": 4}, r"layer_settings\['linear_attention'\]: Config.sliding_window=4"),
        (
            {"layer_settings": {"linear_attention": {"mixer": "gated_deltanet", "attention_chunk": 8}}},
            r"Config.attention_chunk=8",
        ),
        (
            {"layer_settings": {"linear_attention": {"mixer": "gated_deltanet", "position": "none"}}},
            r"Config.layer_settings\['linear_attention'\]\['position'\]='none'",
        ),
        ({"norm": "deepnorm", "norm_placement": "post"}, r"Config.norm='deepnorm'"),
    ],
)
def test_bad_settings_are_refused_by_name(changes, match):
    with pytest.raises(ValueError, match=match):
        tiny(**{**HYBRID, **changes})


def test_a_window_for_the_attention_layers_is_lifted_on_the_deltanet_label():
    """sliding_window for the attention layers, None on the DeltaNet label: accepted, one mask per window."""
    settings = {"linear_attention": {"mixer": "gated_deltanet", "sliding_window": None}}
    model = hybrid(sliding_window=5, layer_settings=settings)
    assert [block.reach.window for block in model.decoder.layers] == [None, None, None, 5]


def test_the_deltanet_layers_have_no_position_encoding():
    """The stack counts only the attention layer as its encoding's (CoPE, whose table has a row per layer, holds
    one) and hands the DeltaNet layers none."""
    stack = hybrid("cope").decoder
    assert stack.recurrent_layers == [0, 1, 2]
    assert stack.position.n_layers == 1 and stack.position.table.shape[0] == 1
    assert stack.layers[3].attn.position is stack.position and stack.layers[3].attn.layer == 0
    assert not any(hasattr(block.attn, "position") for block in stack.layers[:3])


# ------------------------------------------------------------------------------------------- in a model: decoding
@pytest.mark.parametrize("position", ["rope", "alibi"])
@torch.no_grad()
def test_cached_decoding_equals_the_full_pass(position):
    """A left-padded batch: a prefix through the chunked form (two chunks and a bit), a few tokens at once (the
    chunked form from the carried state), then one token at a time (the recurrent form)."""
    model = hybrid(position)
    ids, mask = left_padded(length=16)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    full = model(ids, attention_mask=mask, position_ids=pos).logits
    cache = model.new_cache()
    pieces = []
    for start, end in [(0, 9), (9, 12), (12, 13), (13, 14), (14, 15), (15, 16)]:
        out = model(ids[:, start:end], attention_mask=mask[:, :end], position_ids=pos[:, start:end], cache=cache)
        pieces.append(out.logits)
    real = mask.bool()
    torch.testing.assert_close(torch.cat(pieces, dim=1)[real], full[real], atol=TOLERANCE, rtol=TOLERANCE)
    assert len(cache) == 16 and cache.self_attn[0].recurrent.memory.shape == (2, 4, 8, 6)
    assert cache.self_attn[0].recurrent.conv.shape == (2, 2 * 16 + 24, 3)


@pytest.mark.parametrize("position", ["rope", "alibi"])
@torch.no_grad()
def test_a_left_padded_row_equals_the_row_alone(position):
    model = hybrid(position)
    ids, mask = left_padded(length=14, pads=5)
    batch = model(ids, attention_mask=mask).logits
    alone = model(ids[1:, 5:]).logits
    torch.testing.assert_close(batch[1, 5:], alone[0], atol=TOLERANCE, rtol=TOLERANCE)


@torch.no_grad()
def test_greedy_generation_equals_full_passes():
    model = hybrid("rope")
    ids, mask = left_padded(length=7, pads=2)
    out = model.generate(ids, max_new_tokens=6, attention_mask=mask)
    sequence, keep = ids, mask
    for _ in range(6):
        pos = (keep.cumsum(-1) - 1).clamp(min=0)
        following = model(sequence, attention_mask=keep, position_ids=pos).logits[:, -1].argmax(-1, keepdim=True)
        sequence, keep = torch.cat((sequence, following), 1), torch.cat((keep, torch.ones_like(following)), 1)
    assert torch.equal(out, sequence)


@torch.no_grad()
def test_beam_search_over_the_state_equals_rescoring_the_full_sequences():
    """Each returned beam's score is the sum of the full pass's log-probabilities of its tokens: the DeltaNet
    layers' states followed their rows through every reordering of the beams."""
    model = hybrid("rope")
    prompt = torch.randint(1, 61, (1, 5), generator=torch.Generator().manual_seed(3))
    out, scores = model.generate(
        prompt, max_new_tokens=6, num_beams=3, num_return_sequences=3, return_scores=True, length_penalty=0.0
    )
    logprobs = model(out).logits.log_softmax(-1)[:, 4:-1].gather(-1, out[:, 5:, None]).squeeze(-1).sum(-1)
    torch.testing.assert_close(scores, logprobs, atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_packed_tokens_give_the_padded_layout_outputs():
    """The layer on the real tokens of a packing equals the layer on the padded batch, at the real tokens."""
    torch.manual_seed(0)
    layer = GatedDeltaNet(tiny(**HYBRID).layer_config("linear_attention")).eval()
    x = torch.randn(2, 9, 32)
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, :3] = False
    mask = build_mask(keep, True, 9, 9, x.dtype, x.device)
    pos = torch.zeros(2, 9, dtype=torch.long)
    padded, _ = layer(x, mask, pos)
    packing = TokenPacking(keep)
    packed, _ = layer(packing.pack(x), mask, pos, packing=packing)
    torch.testing.assert_close(packed, padded[keep], atol=TOLERANCE, rtol=TOLERANCE)


def test_output_attentions_and_packed_documents_are_refused_by_name():
    model = hybrid("rope")
    ids = torch.randint(1, 61, (1, 6))
    with pytest.raises(ValueError, match="output_attentions: a gated DeltaNet layer"):
        model(ids, output_attentions=True)
    with pytest.raises(ValueError, match="document_ids: a gated DeltaNet layer"):
        model(ids, document_ids=torch.tensor([[0, 0, 0, 1, 1, 1]]))
    cache = model.new_cache()
    with pytest.raises(ValueError, match="output_attentions"):
        model(ids, cache=cache, output_attentions=True)
    assert len(cache) == 0 and cache.self_attn[3].k is None  # refused before any layer wrote to the cache


def test_the_export_refuses_deltanet_layers(tmp_path):
    model = hybrid("rope", hf_model_type="llama", qkv_bias=False, attn_out_bias=False, ffn_bias=False)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="mixer='gated_deltanet'"):
        pf.to_hf(model, tmp_path)


# ------------------------------------------------------------------------------------------------------ training
def test_a_few_training_steps_lower_the_loss_on_a_repeated_sequence():
    model = hybrid("rope").train()
    ids = torch.arange(1, 9).repeat(1, 3)  # (1, 24): a sequence of 8 tokens, three times
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(12):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    deltanet = model.decoder.layers[0].attn
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in deltanet.parameters())


def test_layer_cache_reorders_the_state_with_its_rows():
    cache = LayerCache()
    model = hybrid("rope")
    model.decoder.layers[0].attn(
        torch.randn(3, 5, 32), build_mask(None, True, 5, 5, torch.float32, "cpu"), torch.arange(5).expand(3, 5), cache
    )
    memory, conv = cache.recurrent.memory.clone(), cache.recurrent.conv.clone()
    cache.reorder(torch.tensor([2, 2, 0]))
    torch.testing.assert_close(cache.recurrent.memory, memory[[2, 2, 0]])
    torch.testing.assert_close(cache.recurrent.conv, conv[[2, 2, 0]])
    assert len(cache) == 5
