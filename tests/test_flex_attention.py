"""attn_impl="flex" (FlexAttention, `posformer.ops.flex`): the score_mod of every encoding that takes it equals its
bias; the whole model equals the SDPA path on the CPU (forward, under torch.compile), padded, cached and
generating; and the configurations it cannot run are refused with the field named."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from tests.positions.test_positions_conformance import config, inputs

FLEX = [name for name in pf.positions.names() if pf.positions.get(name).flex_compatible()]
BIASED = [name for name in FLEX if pf.positions.get(name).bias is not pf.positions.PositionEncoding.bias]

# the fused kernel must really run: PyTorch's unfused fallback (past the recompile limit) fails the test
pytestmark = pytest.mark.filterwarnings("error:flex_attention called without torch.compile")


@pytest.fixture(autouse=True)
def fresh_compile_cache() -> None:
    """Each test starts below torch._dynamo's recompile limit (the kernel is compiled once per shape)."""
    torch._dynamo.reset()


def test_the_encodings_flex_takes_are_those_without_a_bias_or_with_a_distance_bias() -> None:
    assert {"alibi", "t5", "kerple", "none", "rope"} <= set(FLEX)
    assert not {"relative_key", "relative_key_query", "transformer_xl", "deberta", "shaw", "fire"} & set(FLEX)


@pytest.mark.parametrize("name", FLEX)
@pytest.mark.parametrize("causal", [True, False])
def test_score_mod_adds_exactly_the_bias(name: str, causal: bool) -> None:
    """score_mod evaluated on the whole (b, h, q, kv) grid with ordinary indexing equals `bias`, for positions
    that differ per row (left padding) and for one row shared by the batch."""
    arch = "decoder" if causal else "encoder"
    enc = pf.positions.build(config(name, arch), causal=causal, n_layers=2)
    q = k = torch.randn(2, 4, 6, 8)
    for pos in (torch.tensor([[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]), torch.arange(6).expand(2, 6)):
        bias = enc.bias(q, k, pos, pos, 1)
        score_mod = enc.score_mod(pos, pos, 1)
        if bias is None:
            assert score_mod is None
            continue
        b, h, qi, ki = (
            torch.arange(n).view([-1 if d == i else 1 for d in range(4)]) for i, n in enumerate((2, 4, 6, 6))
        )
        added = score_mod(torch.zeros(()), b, h, qi, ki)
        torch.testing.assert_close(added.expand(2, 4, 6, 6), bias.expand(2, 4, 6, 6))


def models(name: str, arch: str, **overrides) -> tuple[pf.Transformer, pf.Transformer]:
    torch.manual_seed(0)
    cfg = config(name, arch, **overrides)
    sdpa = pf.Transformer(cfg).eval()
    flex = pf.Transformer(cfg.replace(attn_impl="flex")).eval()
    flex.load_state_dict(sdpa.state_dict())
    return sdpa, flex


@pytest.mark.parametrize(
    "name, arch", [(name, arch) for name in FLEX for arch in ("decoder", "encoder")] + [("t5", "encoder_decoder")]
)  # cross-attention takes the mask alone
def test_flex_equals_sdpa_with_and_without_padding(name: str, arch: str) -> None:
    sdpa, flex = models(name, arch)
    kwargs = inputs(sdpa.cfg)
    with torch.no_grad():
        torch.testing.assert_close(flex(**kwargs).logits, sdpa(**kwargs).logits, atol=1e-5, rtol=1e-5)
        kwargs["attention_mask"] = torch.tensor([[1] * 7, [0] * 2 + [1] * 5])
        torch.testing.assert_close(flex(**kwargs).logits, sdpa(**kwargs).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_flex_generates_the_tokens_of_sdpa_from_left_padded_prompts(name: str) -> None:
    """With grouped key/value heads (4 query heads over 2): the prompt through FlexAttention, the steps through
    the one-query path."""
    sdpa, flex = models(name, "decoder", n_kv_heads=2)
    prompts = torch.randint(1, sdpa.cfg.vocab_size, (2, 5))
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    expected = sdpa.generate(prompts, attention_mask=mask, max_new_tokens=6, eos_token_id=[])
    assert torch.equal(flex.generate(prompts, attention_mask=mask, max_new_tokens=6, eos_token_id=[]), expected)


def test_flex_refuses_a_gradient_on_the_cpu_with_the_remedy() -> None:
    _, flex = models("alibi", "decoder")
    ids = torch.randint(1, flex.cfg.vocab_size, (2, 5))
    with pytest.raises(RuntimeError, match=r"forward only on the CPU .* train with attn_impl='sdpa'"):
        flex(ids, labels=ids)


def test_flex_configurations_it_cannot_run_name_the_field() -> None:
    with pytest.raises(
        ValueError,
        match=r"Config.attn_impl='flex' is invalid: .*position='relative_key', whose bias "
        r"depends on more than the distance \(FlexAttention takes: alibi, ",
    ):
        config("relative_key", "decoder", attn_impl="flex")
    with pytest.raises(ValueError, match=r"Config.attention_dropout=0.1 is invalid: expected 0 with attn_impl='flex'"):
        config("alibi", "decoder", attn_impl="flex", attention_dropout=0.1)


cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch's FlexAttention trains only on CUDA")


@cuda_only
@pytest.mark.parametrize(
    "name, arch", [(name, "decoder") for name in FLEX] + [(name, "encoder") for name in FLEX if name in BIASED]
)
def test_flex_trains_as_sdpa_on_cuda(name: str, arch: str) -> None:
    """The loss and every parameter's gradient of one padded batch equal the SDPA path's (float32)."""
    sdpa, flex = (model.cuda().train() for model in models(name, arch))
    kwargs = {key: value.cuda() for key, value in inputs(sdpa.cfg).items()}
    kwargs["attention_mask"] = torch.tensor([[1] * 7, [0] * 2 + [1] * 5], device="cuda")
    losses = []
    for model in (sdpa, flex):
        loss = model(**kwargs, labels=kwargs["input_ids"]).loss
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], atol=1e-5, rtol=1e-5)
    grads = dict(sdpa.named_parameters())
    for param_name, param in flex.named_parameters():
        torch.testing.assert_close(param.grad, grads[param_name].grad, atol=1e-5, rtol=1e-4, msg=param_name)


@cuda_only
def test_flex_generates_the_tokens_of_sdpa_on_cuda() -> None:
    sdpa, flex = (model.cuda() for model in models("alibi", "decoder", n_kv_heads=2))
    prompts = torch.randint(1, sdpa.cfg.vocab_size, (2, 5), device="cuda")
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], device="cuda")
    expected = sdpa.generate(prompts, attention_mask=mask, max_new_tokens=6, eos_token_id=[])
    assert torch.equal(flex.generate(prompts, attention_mask=mask, max_new_tokens=6, eos_token_id=[]), expected)
