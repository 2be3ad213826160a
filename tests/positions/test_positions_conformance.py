"""The shared conformance suite: every registered position encoding x every arch.

A newly registered encoding is covered here with no new test code.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import posformer as pf

TRAIN_LENGTH = 16
ARCHS = ["encoder", "decoder", "encoder_decoder"]
CASES = [(name, arch) for arch in ARCHS for name in pf.positions.usable(arch)]
DECODING = [(name, arch) for name, arch in CASES if arch != "encoder"]


def config(position: str, arch: str, **overrides) -> pf.Config:
    # init_std 0.3: large enough weights that a wrong position shows in the logits well above atol
    fields = dict(
        arch=arch,
        vocab_size=53,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        position=position,
        max_positions=TRAIN_LENGTH,
        decoder_start_token_id=0 if arch == "encoder_decoder" else None,
        init_std=0.3,
    )
    fields.update(overrides)
    return pf.Config(**fields)


def inputs(cfg: pf.Config, batch: int = 2, length: int = 7, tgt_length: int = 5) -> dict:
    ids = torch.randint(1, cfg.vocab_size, (batch, length))
    kwargs = {"input_ids": ids}
    if cfg.arch == "encoder_decoder":
        kwargs["decoder_input_ids"] = torch.randint(1, cfg.vocab_size, (batch, tgt_length))
    return kwargs


def cached_left_padded_steps(
    model: pf.Transformer, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, prefix: int
) -> torch.Tensor:
    """A decoder's logits (B, T, V) over the cache, as generation runs it: the first `prefix` tokens, then one
    token per step, the mask growing with the cache."""
    cache = pf.Cache(model.cfg.decoder_layers)
    steps = [model(ids[:, :prefix], attention_mask=mask[:, :prefix], position_ids=pos[:, :prefix], cache=cache).logits]
    steps += [
        model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], position_ids=pos[:, t : t + 1], cache=cache).logits
        for t in range(prefix, ids.shape[1])
    ]
    return torch.cat(steps, dim=1)


def assert_sdpa_equals_eager(cfg: pf.Config, **kwargs) -> None:
    """The same weights through SDPA and through the eager path give the same logits."""
    sdpa = pf.Transformer(cfg).eval()
    eager = pf.Transformer(cfg.replace(attn_impl="eager")).eval()
    eager.load_state_dict(sdpa.state_dict())
    torch.testing.assert_close(sdpa(**kwargs).logits, eager(**kwargs).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, arch", CASES)
def test_forward_backward_reaches_every_encoding_parameter(name: str, arch: str) -> None:
    cfg = config(name, arch)
    model = pf.Transformer(cfg)
    kwargs = inputs(cfg)
    labels = kwargs.get("decoder_input_ids", kwargs["input_ids"])
    out = model(**kwargs, labels=labels)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    stacks = [s for s in (getattr(model, "encoder", None), getattr(model, "decoder", None)) if s is not None]
    for stack in stacks:
        for pname, param in stack.position.named_parameters():
            assert param.grad is not None, f"{name}: no gradient reaches {pname}"
            assert torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0, f"{name}: zero grad {pname}"


@pytest.mark.parametrize("name, arch", DECODING)
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_kv_cached_decoding_equals_full_pass(name: str, arch: str, kv_heads: int) -> None:
    cfg = config(name, arch, n_kv_heads=kv_heads)
    model = pf.Transformer(cfg).eval()
    kwargs = inputs(cfg, length=9, tgt_length=9)
    if arch == "decoder":
        ids = kwargs["input_ids"]
        full = model(ids).logits
        cache = pf.Cache(cfg.decoder_layers)
        steps = [model(ids[:, :3], cache=cache).logits]
        steps += [model(ids[:, t : t + 1], cache=cache).logits for t in range(3, ids.shape[1])]
    else:
        src, tgt = kwargs["input_ids"], kwargs["decoder_input_ids"]
        full = model(src, decoder_input_ids=tgt).logits
        out = model(src, decoder_input_ids=tgt[:, :1], use_cache=True)
        steps = [out.logits]
        for t in range(1, tgt.shape[1]):
            out = model(
                src,
                decoder_input_ids=tgt[:, t : t + 1],
                cache=out.cache,
                decoder_position_ids=torch.full((tgt.shape[0], 1), t),
            )
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, arch", DECODING)
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_kv_cached_decoding_of_a_left_padded_batch_equals_full_pass(name: str, arch: str, kv_heads: int) -> None:
    """A left-padded batch (positions counted from each row's first token) decoded over the cache, as
    generation does: the prefix, then one token per step, the mask growing with the cache."""
    cfg = config(name, arch, n_kv_heads=kv_heads)
    model = pf.Transformer(cfg).eval()
    ids = torch.randint(1, cfg.vocab_size, (2, 10))
    mask = torch.tensor([[0] * 3 + [1] * 7, [1] * 10])
    ids = ids.masked_fill(mask == 0, 0)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    if arch == "decoder":
        full = model(ids, attention_mask=mask, position_ids=pos).logits
        steps = [cached_left_padded_steps(model, ids, mask, pos, prefix=5)]
    else:
        tgt = torch.randint(1, cfg.vocab_size, (2, 6))
        full = model(ids, attention_mask=mask, position_ids=pos, decoder_input_ids=tgt).logits
        out = model(ids, attention_mask=mask, position_ids=pos, decoder_input_ids=tgt[:, :2], use_cache=True)
        steps = [out.logits]
        for t in range(2, tgt.shape[1]):
            out = model(
                ids, decoder_input_ids=tgt[:, t : t + 1], cache=out.cache, decoder_position_ids=torch.full((2, 1), t)
            )
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, arch", CASES)
def test_left_padding_with_position_ids_equals_each_row_alone(name: str, arch: str) -> None:
    cfg = config(name, arch)
    model = pf.Transformer(cfg).eval()
    short = torch.randint(1, cfg.vocab_size, (1, 4))
    long = torch.randint(1, cfg.vocab_size, (1, 7))
    batch = torch.cat((torch.cat((torch.zeros(1, 3, dtype=torch.long), short), 1), long))
    mask = torch.tensor([[0] * 3 + [1] * 4, [1] * 7])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    if arch == "encoder_decoder":
        tgt = torch.randint(1, cfg.vocab_size, (2, 5))
        padded = model(batch, attention_mask=mask, position_ids=pos, decoder_input_ids=tgt).logits
        torch.testing.assert_close(padded[0], model(short, decoder_input_ids=tgt[:1]).logits[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(padded[1], model(long, decoder_input_ids=tgt[1:]).logits[0], atol=1e-5, rtol=1e-5)
        return
    padded = model(batch, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(padded[0, 3:], model(short).logits[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(padded[1], model(long).logits[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, arch", CASES)
def test_sdpa_and_eager_paths_agree(name: str, arch: str) -> None:
    cfg = config(name, arch)
    assert_sdpa_equals_eager(cfg, **inputs(cfg), attention_mask=torch.tensor([[1] * 7, [1] * 5 + [0] * 2]))


@pytest.mark.parametrize("name, arch", DECODING)
def test_causal_attention_in_blocks_of_queries_changes_no_output_or_gradient(name: str, arch: str, monkeypatch) -> None:
    """Attention in blocks of 3 queries (`posformer.ops.causal_blocks`, whose default is 128) gives the logits and
    gradients of one call over all of them, in float64, for a causal stack of every encoding: through SDPA, the
    eager path where the encoding adds a `values` term (Shaw), or the weights of an encoding that replaces the
    softmax (`ops.weighted_attention`)."""
    import posformer.modules.attend as attention
    import posformer.ops.causal_blocks as causal_blocks
    import posformer.ops.weighted_attention as weighted_attention

    query_blocks, query_rows = causal_blocks.query_blocks, weighted_attention.query_rows
    blocked_calls = []
    for module in (attention, causal_blocks):
        monkeypatch.setattr(module, "query_blocks", lambda *args: blocked_calls.append(1) or query_blocks(*args))
    monkeypatch.setattr(
        weighted_attention, "query_rows", lambda n, rows: (rows < n and blocked_calls.append(1)) or query_rows(n, rows)
    )
    cfg = config(name, arch)
    model = pf.Transformer(cfg).double()
    kwargs = inputs(cfg, length=10, tgt_length=10)
    labels = kwargs.get("decoder_input_ids", kwargs["input_ids"])

    def logits_and_grads(block_rows: int):
        monkeypatch.setattr(causal_blocks, "BLOCK_ROWS", block_rows)
        model.zero_grad()
        out = model(**kwargs, labels=labels)
        out.loss.backward()
        return out.logits, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    whole, whole_grads = logits_and_grads(10)
    assert not blocked_calls
    blocked, blocked_grads = logits_and_grads(3)
    torch.testing.assert_close(blocked, whole, atol=1e-10, rtol=1e-10)
    assert blocked_grads.keys() == whole_grads.keys()
    for pname, grad in blocked_grads.items():
        torch.testing.assert_close(grad, whole_grads[pname], atol=1e-10, rtol=1e-10, msg=pname)
    assert blocked_calls


@pytest.mark.parametrize("name, arch", CASES)
def test_four_times_the_training_length(name: str, arch: str) -> None:
    cfg = config(name, arch)
    model = pf.Transformer(cfg).eval()
    kwargs = inputs(cfg, batch=1, length=4 * TRAIN_LENGTH, tgt_length=4 * TRAIN_LENGTH)
    if not pf.positions.get(name).extrapolates:
        with pytest.raises(ValueError, match="max_positions"):
            model(**kwargs)
        return
    with torch.no_grad():
        assert torch.isfinite(model(**kwargs).logits).all()


@pytest.mark.parametrize("name, arch", CASES)
def test_bfloat16_forward_runs(name: str, arch: str) -> None:
    cfg = config(name, arch)
    model = pf.Transformer(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        logits = model(**inputs(cfg)).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()


@pytest.mark.parametrize(
    "name, arch", [(name, arch) for name in pf.positions.names() for arch in ARCHS if (name, arch) not in CASES]
)
def test_an_encoding_of_causal_attention_only_is_refused_elsewhere_by_name(name: str, arch: str) -> None:
    with pytest.raises(ValueError, match=rf"Config.position='{name}' is invalid: .*arch='decoder' only"):
        config(name, arch)


@pytest.mark.parametrize("name, arch", [(name, arch) for name, arch in CASES if arch != "decoder"])
def test_a_right_padded_encoder_batch_trains_as_each_row_alone(name: str, arch: str) -> None:
    """The encoder skips padding (`TokenPacking`): at the real tokens, the outputs and the gradients of a
    padded batch are those of each row run alone; the hidden states of padded positions are zeros."""
    cfg = config(name, arch)
    model = pf.Transformer(cfg).train()
    for module in model.modules():  # dropout off: the same function, row by row
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    rows = [torch.randint(1, cfg.vocab_size, (1, n)) for n in (4, 7)]
    batch = torch.cat((torch.cat((rows[0], torch.zeros(1, 3, dtype=torch.long)), 1), rows[1]))
    mask = torch.tensor([[1] * 4 + [0] * 3, [1] * 7])
    tgt = torch.randint(1, cfg.vocab_size, (2, 5)) if arch == "encoder_decoder" else None

    def run(ids: torch.Tensor, keep: torch.Tensor | None, decoder_ids: torch.Tensor | None) -> tuple:
        model.zero_grad(set_to_none=True)
        out = model(ids, attention_mask=keep, decoder_input_ids=decoder_ids)
        hidden = out.encoder_last_hidden_state if arch == "encoder_decoder" else out.last_hidden_state
        out.logits[:, :4].square().sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return hidden, out.logits[:, :4], grads

    hidden, logits, grads = run(batch, mask, tgt)
    alone = [run(row, None, None if tgt is None else tgt[i : i + 1]) for i, row in enumerate(rows)]
    torch.testing.assert_close(hidden[0, :4], alone[0][0][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hidden[1], alone[1][0][0], atol=1e-5, rtol=1e-5)
    assert not hidden[0, 4:].any()
    torch.testing.assert_close(logits, torch.cat((alone[0][1], alone[1][1])), atol=1e-5, rtol=1e-5)
    for key, grad in grads.items():
        expected = sum(a[2].get(key, torch.zeros_like(grad)) for a in alone)
        torch.testing.assert_close(grad, expected, atol=1e-4, rtol=1e-4, msg=lambda m: f"{key}: {m}")


@pytest.mark.parametrize("name, arch", CASES)
def test_computing_once_per_forward_changes_no_output_or_gradient(name: str, arch: str, monkeypatch) -> None:
    """What an encoding computes once per forward (`per_forward`) and from one row of positions repeated
    over the batch (the default position ids) equals what each layer computes alone from (B, T) positions:
    the same logits, and the same gradient for every parameter (a table shared by the layers sums theirs)."""
    cfg = config(name, arch, n_layers=3, n_decoder_layers=3 if arch == "encoder_decoder" else None)
    model = pf.Transformer(cfg)
    kwargs = inputs(cfg, batch=3)
    labels = kwargs.get("decoder_input_ids", kwargs["input_ids"])

    def logits_and_grads(**extra):
        model.zero_grad()
        out = model(**kwargs, **extra, labels=labels)
        out.loss.backward()
        return out.logits, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    shared, shared_grads = logits_and_grads()
    explicit = {"position_ids": torch.arange(kwargs["input_ids"].shape[1]).repeat(3, 1)}
    if arch == "encoder_decoder":
        explicit["decoder_position_ids"] = torch.arange(labels.shape[1]).repeat(3, 1)
    monkeypatch.setattr(pf.positions.PositionEncoding, "forward_scope", lambda self: contextlib.nullcontext())
    alone, alone_grads = logits_and_grads(**explicit)
    torch.testing.assert_close(shared, alone, atol=1e-5, rtol=1e-5)
    assert shared_grads.keys() == alone_grads.keys()
    for pname in shared_grads:
        torch.testing.assert_close(shared_grads[pname], alone_grads[pname], atol=1e-5, rtol=1e-4, msg=pname)


@pytest.mark.parametrize("return_logits", [True, False])
@pytest.mark.parametrize("name, arch", [(name, arch) for name, arch in CASES if arch != "encoder_decoder"])
def test_compiles_to_one_graph_exactly_when_it_says_so(name: str, arch: str, return_logits: bool) -> None:
    """`compiles_whole`: the forward with labels traces into one `torch.compile` graph (fullgraph, no
    Inductor: the tracing is what breaks) and gives the eager loss, with the logits or the loss alone
    (`return_logits=False`, the chunked head); an encoding that says it breaks does."""
    torch._dynamo.reset()
    cfg = config(name, arch, n_layers=1)
    model = pf.Transformer(cfg)
    kwargs = {**inputs(cfg), "return_logits": return_logits}
    compiled = torch.compile(lambda: model(**kwargs, labels=kwargs["input_ids"]).loss, fullgraph=True, backend="eager")
    if pf.positions.get(name).compiles_whole:
        torch.testing.assert_close(compiled(), model(**kwargs, labels=kwargs["input_ids"]).loss)
    else:
        with pytest.raises(torch._dynamo.exc.TorchDynamoException):  # a graph break (or a data-dependent guard)
            compiled()


@pytest.mark.parametrize("name", pf.positions.usable("decoder"))
def test_each_encoding_builds_alone_from_sizes(name: str) -> None:
    """An encoding needs no Config: checked and built from `Sizes` and its parameters, with the weights of the one
    a model's stack builds, it adds the same position terms, hook for hook."""
    cfg = config(name, "decoder")
    in_model = pf.positions.build(cfg, causal=True, n_layers=cfg.n_layers)
    sizes = pf.positions.Sizes(
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        head_dim=cfg.head_dim,
        max_positions=cfg.max_positions,
        scale=cfg.scale,
        norm_eps=cfg.norm_eps,
        init_std=cfg.init_std,
    )
    encoding = pf.positions.get(name)
    encoding.check_config(sizes, encoding.resolve_params(dict(cfg.position_params)), causal=True)
    alone = encoding(sizes, dict(cfg.position_params), causal=True, n_layers=cfg.n_layers)
    alone.load_state_dict(in_model.state_dict())
    assert alone.params == in_model.params
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, cfg.d_model, generator=generator, dtype=torch.float64)
    q, k = (torch.randn(2, cfg.n_heads, 6, cfg.head_dim, generator=generator, dtype=torch.float64) for _ in range(2))
    pos = torch.arange(6).expand(2, 6)
    probs = torch.softmax(torch.randn(2, cfg.n_heads, 6, 6, generator=generator, dtype=torch.float64), -1)
    for encoding in (in_model, alone):
        encoding.double().eval()
    for layer in range(cfg.n_layers):
        outputs = [
            (
                e.embed(x, pos),
                e.rotate(q, k, pos, pos, layer),
                e.bias(q, k, pos, pos, layer),
                e.values(probs, pos, pos, layer),
            )
            for e in (in_model, alone)
        ]
        torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)


def test_sizes_refuse_a_size_that_is_not_a_positive_integer() -> None:
    with pytest.raises(ValueError, match=r"Sizes.n_heads=0 is invalid: expected an integer >= 1"):
        pf.positions.Sizes(d_model=8, n_heads=0, head_dim=2)


@pytest.mark.parametrize("name, arch", CASES)
def test_position_ids_with_axes_are_refused_by_every_encoding_that_reads_one(name: str, arch: str) -> None:
    """Multi-axis ids (3, B, T) are M-RoPE's (`rope` with an mrope_section); every other encoding names itself."""
    model = pf.Transformer(config(name, arch)).eval()
    kwargs = inputs(model.cfg)
    axes = torch.arange(7).expand(3, 2, 7)
    with pytest.raises(ValueError, match=rf"(?s)position={name!r}.*mrope_section"):
        model(**kwargs, position_ids=axes)
