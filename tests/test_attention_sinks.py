"""Learned attention sinks (Config.attention_sinks, GPT-OSS): a per-head logit in each softmax's denominator.
Oracles on the same tensors: transformers 4.57.6's GPT-OSS `eager_attention_forward` and x-transformers 2.31.10's
`Attend(head_learned_sink=True)`. Properties: a sink at -inf changes nothing; through the model, cached decoding
equals the full pass and blocks of queries change nothing."""

from types import SimpleNamespace

import pytest
import torch
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward
from x_transformers.attend import Attend

import posformer as pf
from posformer.modules.attend import attend
from posformer.ops.masks import build_mask
from tests.positions.test_positions_conformance import config

KEEP = torch.tensor([[1] * 7, [0] * 3 + [1] * 4], dtype=torch.bool)


def _tensors(kv_heads: int = 2) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(2, 4, 7, 8), torch.randn(2, kv_heads, 7, 8), torch.randn(2, kv_heads, 7, 8), torch.randn(4)


def test_equals_gpt_oss_eager_attention_with_padding_and_grouped_heads() -> None:
    q, k, v, sinks = _tensors()
    mask = build_mask(KEEP, True, 7, 7, torch.float32, torch.device("cpu"))
    ours, _ = attend(q, k, v, mask, None, 8**-0.5, sinks=sinks)
    module = SimpleNamespace(sinks=sinks, num_key_value_groups=2, training=False)
    additive = mask.materialized(7, 7, torch.float32, q.device)
    theirs, _ = eager_attention_forward(module, q, k, v, additive, 8**-0.5)
    real = KEEP[:, :, None].expand(2, 7, 4)  # (B, T, H): the outputs at real queries
    torch.testing.assert_close(ours.transpose(1, 2)[real], theirs[real])


def test_equals_x_transformers_head_learned_sink() -> None:
    q, k, v, sinks = _tensors(kv_heads=4)
    reference = Attend(causal=True, heads=4, head_learned_sink=True)
    with torch.no_grad():
        reference.head_attn_sink.copy_(sinks)
    theirs, _ = reference(q, k, v)
    mask = build_mask(None, True, 7, 7, torch.float32, torch.device("cpu"))
    ours, _ = attend(q, k, v, mask, None, 8**-0.5, sinks=sinks)
    torch.testing.assert_close(ours, theirs)


def test_a_sink_at_minus_infinity_is_plain_softmax_attention() -> None:
    q, k, v, _ = _tensors()
    mask = build_mask(KEEP, True, 7, 7, torch.float32, torch.device("cpu"))
    plain, _ = attend(q, k, v, mask, None, 0.3)
    sunk, probs = attend(q, k, v, mask, None, 0.3, kernel="eager", sinks=torch.full((4,), -1e4))
    torch.testing.assert_close(sunk, plain)
    _, probs = attend(q, k, v, mask, None, 0.3, kernel="eager", sinks=torch.zeros(4))
    assert float(probs.sum(-1).max()) < 1.0  # the sink takes its share of every row


@pytest.mark.parametrize("name", ["rope", "alibi", "shaw"])
def test_cached_decoding_with_sinks_equals_the_full_pass(name: str) -> None:
    torch.manual_seed(0)
    model = pf.Transformer(config(name, "decoder", attention_sinks=True, n_kv_heads=2)).eval()
    prompt = torch.randint(1, model.cfg.vocab_size, (2, 5))
    mask = torch.tensor([[1] * 5, [0] * 2 + [1] * 3])
    out = model.generate(prompt, attention_mask=mask, max_new_tokens=5, eos_token_id=[])
    full_mask = torch.cat([mask, torch.ones(2, 5, dtype=mask.dtype)], 1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(out, attention_mask=full_mask, position_ids=positions).logits
    assert torch.equal(logits[:, 4:-1].argmax(-1), out[:, 5:])


@pytest.mark.parametrize("name", ["none", "alibi"])
def test_blocks_of_queries_change_no_output_or_gradient(name: str, monkeypatch) -> None:
    """The causal blocks of the CPU (no bias) and the bias blocks of a long bias (alibi) carry the sinks."""
    import posformer.modules.bias_blocks as bias_blocks
    import posformer.ops.causal_blocks as causal_blocks

    torch.manual_seed(0)
    model = pf.Transformer(config(name, "decoder", attention_sinks=True, max_positions=64)).double()
    ids = torch.randint(1, model.cfg.vocab_size, (2, 40))

    def logits_and_grads() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        out = model(ids, labels=ids)
        out.loss.backward()
        return out.logits, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    whole, grads = logits_and_grads()
    monkeypatch.setattr(causal_blocks, "BLOCK_ROWS", 8)
    monkeypatch.setattr(bias_blocks, "BIAS_BYTES", {"cpu": (1024, 1024)})
    blocked, blocked_grads = logits_and_grads()
    torch.testing.assert_close(blocked, whole)
    for ours, reference in zip(blocked_grads, grads):
        torch.testing.assert_close(ours, reference)


@pytest.mark.parametrize(
    "overrides, why", [({"attn_impl": "flex"}, "attn_impl='flex'"), ({"position": "stick_breaking"}, "no softmax")]
)
def test_sinks_are_refused_where_they_cannot_act(overrides: dict, why: str) -> None:
    with pytest.raises(ValueError, match=rf"Config.attention_sinks=True is invalid: .*{why}"):
        config(overrides.pop("position", "rope"), "decoder", attention_sinks=True, **overrides)
