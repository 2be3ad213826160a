"""The chunked head + cross-entropy against torch's `F.linear` + `F.cross_entropy` (value and the gradients of
hidden states, weight and bias), in one chunk and in many, with rows dropped or weighed 0, under autocast; its
errors; and the model's `return_logits=False` against the model's own logits path for every token head."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import posformer as pf
import posformer.ops.linear_cross_entropy as lce
from posformer.ops.linear_cross_entropy import linear_token_cross_entropy

IGNORE = -100
ROWS, WIDTH, VOCAB = 9, 6, 13


def head_inputs(dtype: torch.dtype, ignored: int, bias: bool) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    hidden = (torch.randn(ROWS, WIDTH) * 2).to(dtype).requires_grad_()
    weight = torch.randn(VOCAB, WIDTH).to(dtype).requires_grad_()
    b = torch.randn(VOCAB).to(dtype).requires_grad_() if bias else None
    labels = torch.randint(0, VOCAB, (ROWS,))
    labels[torch.randperm(ROWS)[:ignored]] = IGNORE
    return hidden, weight, b, labels


def torch_reference(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor
) -> torch.Tensor:
    logits = F.linear(hidden, weight, bias)
    return F.cross_entropy(
        logits.to(torch.promote_types(logits.dtype, torch.float32)), labels, ignore_index=IGNORE, reduction="sum"
    )


def loss_and_grads(fn, hidden, weight, bias, labels, seed: float = 1.7) -> tuple[torch.Tensor, ...]:
    params = [p for p in (hidden, weight, bias) if p is not None and p.requires_grad]
    loss = fn(hidden, weight, bias, labels)
    return (loss, *torch.autograd.grad(loss, params, torch.tensor(seed, dtype=loss.dtype)))


@pytest.fixture(params=["one chunk", "chunks of 2 rows"])
def chunks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Rows per chunk: all the rows at once, or 2 (five chunks, the last of one row)."""
    if request.param == "chunks of 2 rows":
        monkeypatch.setattr(lce, "MIN_CHUNK_ROWS", 2)
        monkeypatch.setattr(lce, "CHUNK_ELEMENTS", 1)
    return lce.chunk_rows(VOCAB)


@pytest.fixture(params=["rows dropped", "rows weighed 0"])
def ignored_rows(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How ignored labels are left out: dropped before the chunks (the CPU in eager mode), or computed and weighed
    0 (what an accelerator and `torch.compile` take, forced here by making the code believe it is compiling)."""
    if request.param == "rows weighed 0":
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    return request.param


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("ignored", [0, 4, ROWS])
def test_value_and_gradients_equal_linear_then_cross_entropy(
    bias: bool, ignored: int, chunks: int, ignored_rows: str
) -> None:
    inputs = head_inputs(torch.float64, ignored, bias)
    ours = loss_and_grads(lambda *a: linear_token_cross_entropy(*a, IGNORE), *inputs)
    theirs = loss_and_grads(torch_reference, *inputs)
    assert ours[0].dtype == torch.float64 and len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        torch.testing.assert_close(mine, reference, rtol=1e-12, atol=1e-12)


def test_only_the_inputs_that_need_it_get_a_gradient(chunks: int) -> None:
    hidden, weight, bias, labels = head_inputs(torch.float64, 2, True)
    weight.requires_grad_(False)
    ours = loss_and_grads(lambda *a: linear_token_cross_entropy(*a, IGNORE), hidden, weight, bias, labels)
    theirs = loss_and_grads(torch_reference, hidden, weight, bias, labels)
    for mine, reference in zip(ours, theirs):
        torch.testing.assert_close(mine, reference, rtol=1e-12, atol=1e-12)


def test_without_autograd_the_loss_alone(chunks: int) -> None:
    hidden, weight, bias, labels = head_inputs(torch.float64, 2, True)
    with torch.no_grad():
        loss = linear_token_cross_entropy(hidden, weight, bias, labels, IGNORE)
        assert loss.grad_fn is None
        torch.testing.assert_close(loss, torch_reference(hidden, weight, bias, labels), rtol=1e-12, atol=1e-12)


def test_passes_gradcheck(chunks: int) -> None:
    hidden, weight, bias, labels = head_inputs(torch.float64, 3, True)
    assert torch.autograd.gradcheck(
        lambda h, w, b: linear_token_cross_entropy(h, w, b, labels, IGNORE), (hidden, weight, bias)
    )


def test_under_bfloat16_autocast_the_products_run_in_bfloat16_as_f_linear() -> None:
    """One chunk: the same bf16 products as autocast's `F.linear` (logits, then the gradients from float32 softmax
    cast to bf16), the loss in float32 and the gradients in the float32 parameters' dtype. The incoming gradient
    is 1: ours scales the finished gradients by it, autocast's path before the bf16 products, which rounds
    differently."""
    inputs = head_inputs(torch.float32, 3, True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = loss_and_grads(lambda *a: linear_token_cross_entropy(*a, IGNORE), *inputs, seed=1.0)
        theirs = loss_and_grads(torch_reference, *inputs, seed=1.0)
    fp32 = loss_and_grads(torch_reference, *inputs, seed=1.0)
    assert ours[0].dtype == torch.float32 and all(g.dtype == torch.float32 for g in ours[1:])
    for mine, reference, exact in zip(ours, theirs, fp32):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(mine, exact, rtol=1e-5, atol=1e-5)  # bf16 really ran


@pytest.mark.parametrize("bad", [VOCAB, -1])
def test_a_label_outside_the_vocabulary_is_named(bad: int) -> None:
    hidden, weight, bias, labels = head_inputs(torch.float32, 0, False)
    labels[0] = bad
    with pytest.raises(ValueError, match=rf"labels must lie in \[0, {VOCAB}\) or be -100, got values in"):
        linear_token_cross_entropy(hidden, weight, bias, labels, IGNORE)


def test_labels_of_the_wrong_shape_are_named() -> None:
    hidden, weight, bias, labels = head_inputs(torch.float32, 0, False)
    with pytest.raises(ValueError, match=r"labels has shape \(8,\); expected \(9,\)"):
        linear_token_cross_entropy(hidden, weight, bias, labels[:8], IGNORE)


TOKEN_HEAD_MODELS = {
    "causal decoder (llama)": dict(preset="llama"),
    "causal decoder, tied (gpt2)": dict(preset="gpt2"),
    "masked LM: transform and bias (bert)": dict(preset="bert"),
    "seq2seq, tied head scaled (t5)": dict(preset="t5", scale_tied_head=True, tie_embeddings=True),
}


@pytest.mark.parametrize("case", TOKEN_HEAD_MODELS)
def test_the_model_returns_the_same_loss_and_gradients_without_logits(case: str, chunks: int) -> None:
    options = dict(TOKEN_HEAD_MODELS[case])
    cfg = pf.Config.preset(
        options.pop("preset"),
        vocab_size=VOCAB * 3,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=32,
        max_positions=32,
        dropout=0.0,
        attention_dropout=0.0,
        **options,
    )
    torch.manual_seed(0)
    model = pf.Transformer(cfg).double()
    ids = torch.randint(0, cfg.vocab_size, (3, 7))
    labels = ids.clone()
    labels[0, :4] = IGNORE

    def loss_and_grads_of(return_logits: bool) -> tuple[torch.Tensor, ...]:
        out = model(input_ids=ids, labels=labels, return_logits=return_logits)
        assert (out.logits is None) == (not return_logits)
        return (out.loss, *torch.autograd.grad(out.loss, list(model.parameters()), allow_unused=True))

    for loss_only, with_logits in zip(loss_and_grads_of(False), loss_and_grads_of(True)):
        torch.testing.assert_close(loss_only, with_logits, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "call, error",
    [
        (dict(preset="llama", labels=False, return_logits=False), r"needs labels .* this call has labels=None"),
        (dict(preset="bert", head="classification", return_logits=False), r"head 'classification'"),
        (dict(preset="llama", return_logits=0), r"return_logits must be True or False, got 0"),
    ],
)
def test_the_model_refuses_return_logits_where_it_cannot_apply(call: dict, error: str) -> None:
    call = dict(call)
    cfg = pf.Config.preset(
        call.pop("preset"),
        vocab_size=40,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=32,
        max_positions=32,
        **({"head": call.pop("head"), "num_labels": 2} if "head" in call else {}),
    )
    ids = torch.randint(0, 40, (2, 5))
    labels = None if call.pop("labels", True) is False else ids[:, 0] % 2 if cfg.head_kind == "classification" else ids
    with pytest.raises(ValueError, match=error):
        pf.Transformer(cfg)(input_ids=ids, labels=labels, **call)
