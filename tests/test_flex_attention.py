"""attn_impl="flex" (FlexAttention, `posformer.ops.flex`): the score_mod of every encoding that takes it equals its
bias; the block mask of every mask rule is the one PyTorch builds from the dense mask; the whole model equals the SDPA
path on the CPU (forward, under torch.compile), padded, at shifted positions, windowed, cached and generating, past
torch's global recompile limit; and the configurations it cannot run are refused with the reason."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.ops import flex as flex_ops
from posformer.ops.flex import flex_attend
from posformer.ops.flex_blocks import block_mask
from posformer.ops.masks import AttentionMask, MaskRule
from tests.positions.test_positions_conformance import config, inputs

FLEX = [name for name in pf.positions.names() if pf.positions.get(name).flex_compatible()]
BIASED = [name for name in FLEX if pf.positions.get(name).adds_bias]
# FIRE's MLP is unrolled in the compiled kernel: a narrow one compiles in a fraction of the time, through the same code
NARROW = {"fire": {"position_params": {"mlp_width": 4}}}

# the fused kernel must really run: PyTorch's unfused fallback (past a recompile limit) fails the test
pytestmark = pytest.mark.filterwarnings("error:flex_attention called without torch.compile")


def test_flex_takes_every_encoding_but_those_whose_bias_it_cannot_express() -> None:
    assert set(pf.positions.names()) - set(FLEX) == {
        "shaw",
        "cope",
        "transformer_xl",
        "rerope",
        "self_extend",
        "dual_chunk",
        "streaming",
        "fox_per_row",
        "stick_breaking",
        "path",
    }
    assert {"alibi", "t5", "kerple", "fire", "relative_key", "relative_key_query", "deberta"} <= set(BIASED)


POSITIONS = {  # (q_pos, k_pos): the queries are the last of the keys
    "per row, left padded": (torch.tensor([[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]),) * 2,
    "one row for the batch": (torch.arange(6).expand(2, 6),) * 2,
    "not from 0": (torch.tensor([[5, 6, 7, 8, 9, 10], [2, 3, 4, 5, 6, 7]]),) * 2,
    "cached keys": (torch.arange(4, 6).expand(2, 2), torch.arange(6).expand(2, 6)),
}


@pytest.mark.parametrize("name", FLEX)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("positions", POSITIONS)
def test_score_mod_adds_exactly_the_bias(name: str, causal: bool, positions: str) -> None:
    """score_mod evaluated on the whole (b, h, q, kv) grid with ordinary indexing equals `bias` at every pair the
    mask keeps (a causal stack's bias is any finite value past the query), with grouped key/value heads."""
    arch = "decoder" if causal else "encoder"
    if pf.positions.get(name).causal_only and not causal:
        pytest.skip(f"{name} is causal only")
    enc = pf.positions.build(config(name, arch), causal=causal, n_layers=2)
    q_pos, k_pos = POSITIONS[positions]
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, q_pos.shape[1], 8), torch.randn(2, 2, k_pos.shape[1], 8)
    bias = enc.bias(q, k, q_pos, k_pos, 1)
    score_mod = enc.score_mod(q, k, q_pos, k_pos, 1)
    if bias is None:
        assert score_mod is None
        return
    shape = (2, 4, q_pos.shape[1], k_pos.shape[1])
    b, h, qi, ki = (torch.arange(n).view([-1 if d == i else 1 for d in range(4)]) for i, n in enumerate(shape))
    added = score_mod(torch.zeros(()), b, h, qi, ki).expand(shape)
    kept = (k_pos[:, None, None, :] <= q_pos[:, None, :, None]) if causal else torch.ones(shape, dtype=torch.bool)
    kept = kept.expand(shape)
    torch.testing.assert_close(added[kept], bias.expand(shape)[kept])


def _dense_block_mask(rule: MaskRule):
    from torch.nn.attention.flex_attention import create_block_mask

    def allowed(b, h, q_idx, kv_idx):
        seen = torch.ones_like(kv_idx, dtype=torch.bool) if rule.key_keep is None else rule.key_keep[b, kv_idx]
        if rule.causal:
            seen = seen & (kv_idx <= q_idx + rule.offset)
            if rule.window is not None:
                seen = seen & (kv_idx > q_idx + rule.offset - rule.window)
            if rule.chunk is not None:
                lead = rule.lead()[b if rule.key_keep is not None else 0, 0]
                seen = seen & ((kv_idx - lead) // rule.chunk == (q_idx + rule.offset - lead) // rule.chunk)
        elif rule.window is not None:
            seen = seen & ((kv_idx - q_idx - rule.offset).abs() < rule.window)
        if rule.documents is not None:
            seen = seen & (rule.documents[b, kv_idx] == rule.documents[b, q_idx + rule.offset])
        return seen

    batch = 1 if rule.key_keep is None and rule.documents is None else 3
    return create_block_mask(allowed, batch, None, rule.q_len, rule.k_len, device="cpu")


@pytest.mark.parametrize(
    "causal, window, chunk",
    [
        (False, None, None),
        (False, 200, None),
        (False, 40, None),
        (True, None, None),
        (True, 200, None),
        (True, 40, None),
        (True, None, 100),
        (True, 40, 256),
    ],
)
@pytest.mark.parametrize("q_len, k_len", [(300, 300), (130, 390), (1, 257), (128, 256)])
@pytest.mark.parametrize("padding", ["none", "left", "scattered"])
def test_block_mask_of_a_rule_is_the_one_pytorch_builds_from_the_dense_mask(
    causal, window, chunk, q_len, k_len, padding
):
    """Padding (left, or keys dropped here and there, one row losing a whole block), causal order after cached
    keys, windows narrower and wider than a block (behind causal queries, or on both sides), chunks (counted from
    each row's first real key) narrower and wider than a block: the same partial and full blocks, in the same
    order."""
    if padding == "none" and not causal and window is None:
        assert block_mask(MaskRule(q_len, k_len, torch.device("cpu"))) is None
        return
    keep = None
    if padding != "none":
        generator = torch.Generator().manual_seed(q_len + k_len)
        keep = torch.ones(3, k_len, dtype=torch.bool)
        keep[0, : k_len // 3] = False
        if padding == "scattered":
            keep[1] = torch.rand(k_len, generator=generator) > 0.3
            keep[2, 128:256] = False
    rule = MaskRule(q_len, k_len, torch.device("cpu"), keep, causal, window, chunk)
    ours, dense = block_mask(rule), _dense_block_mask(rule)
    for field in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(ours, field), getattr(dense, field)), field
    assert ours.seq_lengths == dense.seq_lengths


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_len, k_len", [(300, 300), (130, 390)])
@pytest.mark.parametrize("padding", [False, True])
def test_block_mask_of_packed_documents_is_the_one_pytorch_builds(causal, q_len, k_len, padding):
    """Documents shorter and longer than a block, one ending on a block's edge, after cached keys, with and
    without padding at the rows' ends: the same partial and full blocks."""
    documents = torch.zeros(3, k_len, dtype=torch.long)
    for row, lengths in enumerate([(5, 123, 200), (128, 128, 7), (300,)]):
        edges = torch.tensor(lengths).cumsum(0)
        documents[row] = (torch.arange(k_len)[:, None] >= edges[None, :]).sum(-1)
    keep = None
    if padding:
        keep = torch.ones(3, k_len, dtype=torch.bool)
        keep[:, -20:] = False
    rule = MaskRule(q_len, k_len, torch.device("cpu"), keep, causal, documents=documents)
    ours, dense = block_mask(rule), _dense_block_mask(rule)
    for field in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(ours, field), getattr(dense, field)), field


def test_flex_equals_sdpa_on_packed_documents() -> None:
    sdpa, flex = models("alibi", "decoder")
    ids = torch.randint(1, sdpa.cfg.vocab_size, (2, 9))
    documents = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(
            flex(ids, document_ids=documents).logits, sdpa(ids, document_ids=documents).logits, atol=1e-5, rtol=1e-5
        )


def models(name: str, arch: str, **overrides) -> tuple[pf.Transformer, pf.Transformer]:
    torch.manual_seed(0)
    cfg = config(name, arch, **{**NARROW.get(name, {}), **overrides})
    sdpa = pf.Transformer(cfg).eval()
    flex = pf.Transformer(cfg.replace(attn_impl="flex")).eval()
    flex.load_state_dict(sdpa.state_dict())
    return sdpa, flex


LEFT_PADDED = torch.tensor([[1] * 7, [0] * 2 + [1] * 5])
SHIFTED = torch.tensor([[4, 5, 6, 7, 8, 9, 10], [0, 0, 0, 1, 2, 3, 4]])  # one row not from 0, one left padded


# each case compiles kernels of its own on the CPU: every flex encoding as a decoder, and as an encoder those whose
# bias is not one table of the distance (t5's buckets tell the two directions apart)
PADDED_CASES = (
    [(name, "decoder") for name in FLEX]
    + [(name, "encoder") for name in ("t5", "fire", "relative_key_query", "deberta") if name in FLEX]
    + [("t5", "encoder_decoder")]  # cross-attention takes the mask alone
)


@pytest.mark.parametrize("name, arch", PADDED_CASES)
def test_flex_equals_sdpa_padded_and_at_shifted_positions(name: str, arch: str) -> None:
    """A left-padded batch whose other row does not start at 0 (each input is one more compiled kernel on the CPU;
    the unpadded paths are in `test_flex_keeps_compiling_past_torchs_global_recompile_limit`)."""
    sdpa, flex = models(name, arch)
    kwargs = inputs(sdpa.cfg)
    kwargs.update(attention_mask=LEFT_PADDED, position_ids=SHIFTED)
    with torch.no_grad():
        torch.testing.assert_close(flex(**kwargs).logits, sdpa(**kwargs).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("reach", [{"sliding_window": 3}, {"attention_chunk": 3}])
def test_flex_equals_sdpa_in_a_sliding_window_or_chunks_after_cached_keys(reach: dict) -> None:
    """A left-padded prompt in two parts, the second after the first's cached keys, each query seeing its last 3
    key slots, or the keys of its chunk of 3: the block mask of causal order after a cache, a window or chunks and
    padding at once, with an encoding that scores queries and keys against its table."""
    sdpa, flex = models("relative_key_query", "decoder", **reach)
    ids = inputs(sdpa.cfg)["input_ids"]
    logits = []
    with torch.no_grad():
        for model in (sdpa, flex):
            cache = pf.Cache(model.cfg.decoder_layers)
            first = model(ids[:, :4], attention_mask=LEFT_PADDED[:, :4], position_ids=SHIFTED[:, :4], cache=cache)
            second = model(ids[:, 4:], attention_mask=LEFT_PADDED, position_ids=SHIFTED[:, 4:], cache=cache)
            logits.append(torch.cat([first.logits, second.logits], dim=1))
    torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=1e-5)


def test_flex_equals_sdpa_in_an_encoders_window_on_both_sides() -> None:
    """A left-padded encoder whose queries see the key slots fewer than 3 away on either side (ModernBERT's local
    layers): the block mask and mask_mod of a bidirectional window."""
    sdpa, flex = models("relative_key_query", "encoder", sliding_window=3)
    kwargs = inputs(sdpa.cfg)
    kwargs.update(attention_mask=LEFT_PADDED, position_ids=SHIFTED)
    with torch.no_grad():
        torch.testing.assert_close(flex(**kwargs).logits, sdpa(**kwargs).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "fire", "relative_key_query"])  # a distance table, an MLP, q and k tables
def test_flex_generates_the_tokens_of_sdpa_from_left_padded_prompts(name: str) -> None:
    """With grouped key/value heads (4 query heads over 2): the prompt through FlexAttention, the steps through
    the one-query path."""
    sdpa, flex = models(name, "decoder", n_kv_heads=2)
    prompts = torch.randint(1, sdpa.cfg.vocab_size, (2, 5))
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    expected = sdpa.generate(prompts, attention_mask=mask, max_new_tokens=6, eos_token_id=[])
    assert torch.equal(flex.generate(prompts, attention_mask=mask, max_new_tokens=6, eos_token_id=[]), expected)


@pytest.mark.parametrize("torch_compile", ["with a per-function limit", "without one (torch before 2.12)"])
def test_flex_keeps_compiling_past_torchs_global_recompile_limit(torch_compile: str, monkeypatch) -> None:
    """More compiled shapes than torch._dynamo's global recompile limit (lowered here to 1 from its 8): the kernel
    has a limit of its own, so every shape still runs fused (PyTorch's unfused fallback warns, which fails the test)
    and right. Unpadded: a plain causal block mask, and no block mask at all. Where torch.compile takes no
    recompile_limit, the kernel's calls raise the global limits for themselves."""
    if torch_compile.startswith("without"):
        from torch.nn.attention.flex_attention import flex_attention

        kernel = flex_ops._with_own_recompile_limit(torch.compile(flex_attention, dynamic=False))
        monkeypatch.setattr(flex_ops, "_kernel", lambda: kernel)
    with torch._dynamo.config.patch(recompile_limit=1), torch.no_grad():
        for arch, length in (("decoder", 3), ("decoder", 5), ("encoder", 6)):
            sdpa, flex = models("alibi", arch)
            ids = torch.randint(1, sdpa.cfg.vocab_size, (2, length))
            torch.testing.assert_close(flex(ids).logits, sdpa(ids).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head_dim", [8, 16])
def test_flex_gives_narrow_heads_right_where_the_cpu_kernel_does_not(head_dim: int) -> None:
    """torch 2.13's CPU kernel is wrong for heads of 8 or 16 over 24 keys (8 more than a multiple of 16); padded
    with zero columns, the heads give SDPA's output."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 24, head_dim) for _ in range(3))
    with torch.no_grad():
        out = flex_attend(q, k, v, AttentionMask(), None, head_dim**-0.5)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))


def test_flex_refuses_a_gradient_on_the_cpu_with_the_remedy() -> None:
    _, flex = models("alibi", "decoder")
    ids = torch.randint(1, flex.cfg.vocab_size, (2, 5))
    with pytest.raises(RuntimeError, match=r"forward only on the CPU .* train with attn_impl='sdpa'"):
        flex(ids, labels=ids)


@pytest.mark.parametrize(
    "name, why",
    [
        ("shaw", r"its values term needs the attention probabilities"),
        ("cope", r"its positions are counted from the attention scores"),
        ("transformer_xl", r"its bias \(q_i \+ v\).W_R R_\{i-j\} is a product over the head dim for each pair"),
    ],
)
def test_flex_refuses_the_encodings_it_cannot_express_with_the_reason(name: str, why: str) -> None:
    with pytest.raises(
        ValueError,
        match=rf"Config.attn_impl='flex' is invalid: expected 'sdpa' or 'eager' with position='{name}': {why}.* "
        r"\(FlexAttention takes: alibi, deberta, fire, ",
    ):
        config(name, "decoder", attn_impl="flex")


def test_flex_refuses_attention_dropout() -> None:
    with pytest.raises(ValueError, match=r"Config.attention_dropout=0.1 is invalid: expected 0 with attn_impl='flex'"):
        config("alibi", "decoder", attn_impl="flex", attention_dropout=0.1)


cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch's FlexAttention trains only on CUDA")


@cuda_only
@pytest.mark.parametrize(
    "name, arch",
    [(name, "decoder") for name in FLEX]
    + [(name, "encoder") for name in BIASED if name in pf.positions.usable("encoder")],
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
