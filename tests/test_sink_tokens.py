"""Learned sink tokens (Config.sink_tokens, StreamingLLM's learnable sink). Oracle: x-transformers 2.31.10's
`TransformerWrapper(num_memory_tokens=n)` on the same weights (a rotary decoder, whose memory tokens lead the
sequence as ours do). Properties: cached decoding equals the full pass, left padding changes nothing, a streaming
cache that keeps the sinks decodes as the full pass over the tokens it keeps, and bad settings are named."""

import pytest
import torch
from x_transformers import TransformerWrapper

import posformer as pf
from posformer.bench.x_transformers_peer import llama_shaped_decoder
from posformer.hf import UnsupportedCheckpoint, to_hf

SINKS = 2


def decoder(**overrides) -> pf.Transformer:
    torch.manual_seed(0)
    fields = dict(
        arch="decoder",
        vocab_size=40,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        position="rope",
        position_params={"layout": "interleaved"},
        norm="rmsnorm",
        norm_eps=1e-12,
        activation="swiglu",
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        tie_embeddings=False,
        sink_tokens=SINKS,
    )
    return pf.Transformer(pf.Config(**{**fields, **overrides})).eval()


def x_transformers_copy(model: pf.Transformer) -> TransformerWrapper:
    """x-transformers' decoder with memory tokens, holding `model`'s weights."""
    cfg = model.cfg
    layers = llama_shaped_decoder(cfg)
    peer = TransformerWrapper(
        num_tokens=cfg.vocab_size,
        max_seq_len=cfg.max_positions,
        attn_layers=layers,
        num_memory_tokens=cfg.sink_tokens,
        tie_embedding=False,
    ).eval()
    with torch.no_grad():
        if cfg.sink_tokens:
            peer.memory_tokens.copy_(model.sink_tokens.weight)
        peer.token_emb.emb.weight.copy_(model.embed_tokens.weight)
        peer.to_logits.weight.copy_(model.head.proj.weight)
        norms = [(peer.attn_layers.final_norm, model.decoder.norm)]
        for i, ours in enumerate(model.decoder.layers):
            attn_norm, attn = peer.attn_layers.layers[2 * i][0][0], peer.attn_layers.layers[2 * i][1]
            ffn_norm, ffn = peer.attn_layers.layers[2 * i + 1][0][0], peer.attn_layers.layers[2 * i + 1][1]
            norms += [(attn_norm, ours.attn_res.norm), (ffn_norm, ours.ffn_res.norm)]
            q, k, v = ours.attn.qkv.weight.chunk(3)
            attn.to_q.weight.copy_(q)
            attn.to_k.weight.copy_(k)
            attn.to_v.weight.copy_(v)
            attn.to_out.weight.copy_(ours.attn.out.weight)
            gate, value = ours.ffn.up.weight.chunk(2)  # x-transformers' GLU projects [value; gate]
            ffn.ff[0].proj.weight.copy_(torch.cat((value, gate)))
            ffn.ff[0].proj.bias.zero_()
            ffn.ff[2].weight.copy_(ours.ffn.down.weight)
        for theirs, mine in norms:  # x-transformers' RMSNorm may scale by g + 1 (`unit_offset`)
            theirs.g.copy_(mine.weight - float(theirs.unit_offset))
    return peer


def test_logits_equal_x_transformers_memory_tokens_on_the_same_weights() -> None:
    model = decoder()
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        for weight in model.parameters():  # norms away from 1, so that a misplaced one shows
            weight.add_(0.05 * torch.randn_like(weight))
        ours = model(ids).logits
        theirs = x_transformers_copy(model)(ids)
    assert ours.shape == (2, 9, 40)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_the_sinks_change_the_output_and_learn() -> None:
    model = decoder()
    ids = torch.randint(0, 40, (2, 9))
    logits = model(ids).logits
    logits.square().mean().backward()
    assert model.sink_tokens.weight.grad.abs().sum() > 0
    with torch.no_grad():
        model.sink_tokens.weight.mul_(3)
        assert not torch.allclose(model(ids).logits, logits)


def test_cached_decoding_and_left_padding_equal_the_full_pass() -> None:
    model = decoder()
    ids = torch.randint(0, 40, (1, 10))
    with torch.no_grad():
        full = model(ids).logits
        cache = model.new_cache()
        steps = [model(ids[:, :4], cache=cache, use_cache=True).logits]
        for t in range(4, 10):
            mask = torch.ones(1, t + 1, dtype=torch.long)
            steps.append(model(ids[:, t : t + 1], attention_mask=mask, cache=cache).logits)
        torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)
        padded = torch.cat((torch.zeros(1, 3, dtype=torch.long), ids), dim=1)
        mask = torch.cat((torch.zeros(1, 3), torch.ones(1, 10)), dim=1).long()
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        left = model(padded, attention_mask=mask, position_ids=position_ids).logits[:, 3:]
        torch.testing.assert_close(left, full, rtol=1e-4, atol=1e-5)
        from_padded = model.generate(padded, max_new_tokens=5, attention_mask=mask)[:, 3:]
        assert torch.equal(from_padded, model.generate(ids, max_new_tokens=5))


def test_generation_refreshes_a_stale_cache_counting_the_sinks_positions() -> None:
    """Dynamic YaRN's cached keys go stale past a length (`stale_beyond`, 8 here) that counts the sinks' positions
    too: generation re-encodes then, so its scores equal greedy decoding by full passes."""
    scaling = {"type": "dynamic_yarn", "factor": 2.0, "original_max_position_embeddings": 4}
    model = decoder(position_params={"layout": "interleaved", "scaling": scaling}, init_std=0.3)
    ids = torch.randint(0, 40, (1, 3))
    with torch.no_grad():
        tokens, score = model.generate(ids, max_new_tokens=9, return_scores=True)
        total = torch.zeros(1)
        for _ in range(9):
            log_probs = model(ids).logits[:, -1].float().log_softmax(-1)
            ids = torch.cat((ids, log_probs.argmax(-1, keepdim=True)), dim=1)
            total += log_probs.max(-1).values
    assert torch.equal(tokens, ids)
    torch.testing.assert_close(score, total, rtol=1e-5, atol=1e-5)


def test_a_streaming_cache_keeps_the_sink_tokens_in_view() -> None:
    params = {"sinks": SINKS, "window": 6}
    model = decoder(position="streaming", position_params=params, max_positions=64)
    ids = torch.randint(0, 40, (1, 20))
    with torch.no_grad():
        full = model(ids).logits[:, -1]
        cache = model.new_cache()
        model(ids[:, :1], cache=cache, use_cache=True)
        for t in range(1, 20):
            last = model(ids[:, t : t + 1], attention_mask=torch.ones(1, t + 1), cache=cache).logits[:, -1]
    assert len(cache) <= SINKS + 6
    torch.testing.assert_close(last, full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"arch": "encoder", "head": None}, r"sink_tokens=2 is invalid: expected 0 with arch='encoder'"),
        ({"sliding_window": 4}, r"sink_tokens=2 is invalid: expected 0 with a sliding_window or attention_chunk"),
        ({"sink_tokens": -1}, r"sink_tokens=-1 is invalid"),
    ],
)
def test_bad_settings_are_refused_by_name(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        decoder(**overrides)


def test_to_hf_refuses_sink_tokens(tmp_path) -> None:
    model = decoder(hf_model_type="llama")
    with pytest.raises(UnsupportedCheckpoint, match=r"Config.sink_tokens=2: llama has no such setting"):
        to_hf(model, tmp_path)
