"""Every registered encoding's bias asked for by blocks of queries (`modules.bias_blocks`) gives what the whole bias
gives: the logits (with gradients and without) and every gradient, causal and bidirectional, with left padding, and
over a KV cache.

The block budget is shrunk so that a 13-token sequence runs in blocks of 4 queries (the last one shorter).
"""

from __future__ import annotations

import pytest
import torch
from test_positions_conformance import CASES, DECODING, cached_left_padded_steps, config
from torch.utils._python_dispatch import TorchDispatchMode

import posformer as pf
import posformer.modules.bias_blocks as bias_blocks

LENGTH = 13
BIAS_CASES = [(name, arch) for name, arch in CASES if pf.positions.get(name).adds_bias]


def blocks_of(monkeypatch: pytest.MonkeyPatch, rows: int, cfg: pf.Config, batch: int) -> None:
    """Make every bias of this model's shape run in blocks of `rows` queries (the encoding's own size of a block
    set aside)."""
    row_bytes = batch * cfg.n_heads * LENGTH * 4
    monkeypatch.setitem(bias_blocks.BIAS_BYTES, "cpu", (rows * row_bytes, rows * row_bytes))
    monkeypatch.setattr(bias_blocks, "MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(pf.positions.get(cfg.position), "cpu_bias_block_bytes", None)
    assert bias_blocks.bias_block_rows(batch, cfg.n_heads, LENGTH, LENGTH, torch.device("cpu")) == rows


def inputs(cfg: pf.Config, batch: int, padded: bool) -> dict:
    ids = torch.randint(1, cfg.vocab_size, (batch, LENGTH))
    kwargs = {"input_ids": ids}
    if padded:
        mask = torch.ones(batch, LENGTH, dtype=torch.long)
        mask[0, :3] = 0  # left padding, as batched generation has it
        kwargs["attention_mask"] = mask
    if cfg.arch == "encoder_decoder":
        kwargs["decoder_input_ids"] = torch.randint(1, cfg.vocab_size, (batch, LENGTH))
    return kwargs


def loss_and_grads(model: pf.Transformer, kwargs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    labels = kwargs.get("decoder_input_ids", kwargs["input_ids"])
    model.zero_grad(set_to_none=True)
    out = model(**kwargs, labels=labels)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left-padded"])
@pytest.mark.parametrize("name, arch", BIAS_CASES)
def test_blocks_give_the_whole_bias_logits_and_gradients(name, arch, padded, monkeypatch) -> None:
    cfg = config(name, arch, max_positions=2 * LENGTH, attention_dropout=0.0, dropout=0.0)
    torch.manual_seed(0)
    model = pf.Transformer(cfg).double()
    kwargs = inputs(cfg, batch=2, padded=padded)
    whole_logits, whole_grads = loss_and_grads(model, kwargs)
    blocks_of(monkeypatch, 4, cfg, batch=2)
    block_logits, block_grads = loss_and_grads(model, kwargs)
    torch.testing.assert_close(block_logits, whole_logits, atol=1e-10, rtol=1e-10)
    with torch.no_grad():  # without gradients the blocks write into one output instead of being checkpointed
        torch.testing.assert_close(model(**kwargs).logits, whole_logits, atol=1e-10, rtol=1e-10)
    assert block_grads.keys() == whole_grads.keys()
    for param, grad in whole_grads.items():
        # FIRE, KERPLE and others compute their distances in float32 whatever the model's dtype, so a parameter's
        # gradient summed over blocks differs from the one summed whole by float32 rounding (FIRE's c: 1.5e-7)
        torch.testing.assert_close(block_grads[param], grad, atol=1e-9, rtol=1e-6, msg=param)


@pytest.mark.parametrize("name, arch", [case for case in DECODING if case in BIAS_CASES and case[1] == "decoder"])
def test_a_blockwise_prefill_then_cached_steps_give_the_full_forward(name, arch, monkeypatch) -> None:
    cfg = config(name, arch, max_positions=2 * LENGTH)
    torch.manual_seed(0)
    model = pf.Transformer(cfg).double().eval()
    ids = torch.randint(1, cfg.vocab_size, (2, LENGTH))
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[0, :3] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(ids, attention_mask=mask, position_ids=pos).logits
        blocks_of(monkeypatch, 4, cfg, batch=2)
        stepped = cached_left_padded_steps(model, ids, mask, pos, prefix=9)
    keep = mask.bool()
    torch.testing.assert_close(stepped[keep], full[keep], atol=1e-9, rtol=1e-9)


def test_a_long_bias_is_never_whole(monkeypatch) -> None:
    """At a length whose whole bias exceeds the budget, no bias the encoding returns covers every query."""
    cfg = config("t5", "decoder", max_positions=64)
    model = pf.Transformer(cfg).eval()
    seen_rows = []
    encoding = model.decoder.position
    original = type(encoding).bias

    def recording(self, q, k, q_pos, k_pos, layer):
        out = original(self, q, k, q_pos, k_pos, layer)
        seen_rows.append(out.shape[-2])
        return out

    monkeypatch.setattr(type(encoding), "bias", recording)
    blocks_of(monkeypatch, 4, cfg, batch=1)
    with torch.no_grad():
        model(torch.randint(1, cfg.vocab_size, (1, LENGTH)))
    assert seen_rows and max(seen_rows) == 4


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self.numel = max(self.numel, tensor.numel())
        return out


def largest_tensor_of_a_forward(model: pf.Transformer, length: int) -> int:
    ids = torch.randint(1, model.cfg.vocab_size, (1, length))
    with torch.no_grad(), LargestTensor() as recorder:
        model(ids)
    return recorder.numel


@pytest.mark.parametrize("name", [name for name, arch in BIAS_CASES if arch == "decoder"])
def test_the_largest_tensor_of_a_long_forward_grows_linearly(name, monkeypatch) -> None:
    """With a fixed block budget, doubling the length at most about doubles the largest tensor a forward makes
    (a whole bias would quadruple it), and no tensor holds a (T, T) bias of one head."""
    cfg = config(name, "decoder", max_positions=512, n_heads=2, d_model=16, d_ff=16)
    model = pf.Transformer(cfg).eval()
    monkeypatch.setitem(bias_blocks.BIAS_BYTES, "cpu", (2**12, 2**12))  # blocks of 4 queries at T = 128 (2 heads)
    monkeypatch.setattr(bias_blocks, "MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(pf.positions.get(name), "cpu_bias_block_bytes", None)
    short, long = (largest_tensor_of_a_forward(model, length) for length in (128, 256))
    assert long < 256 * 256, (short, long)
    assert long <= 2.5 * short, (short, long)


def test_an_encodings_own_block_size_sets_its_rows_on_the_cpu_only(monkeypatch) -> None:
    """`cpu_bias_block_bytes` replaces the CPU's block budget for that encoding (DeBERTa: 8 rows where the budget
    gives 4), and leaves a GPU's alone."""
    cfg = config("deberta", "decoder", max_positions=64)
    model = pf.Transformer(cfg).eval()
    row_bytes = cfg.n_heads * LENGTH * 4
    monkeypatch.setitem(bias_blocks.BIAS_BYTES, "cpu", (row_bytes, 4 * row_bytes))
    monkeypatch.setattr(bias_blocks, "MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(type(model.decoder.position), "cpu_bias_block_bytes", 8 * row_bytes)
    seen_rows = []
    original = type(model.decoder.position).bias

    def recording(self, q, k, q_pos, k_pos, layer):
        seen_rows.append(q.shape[-2])
        return original(self, q, k, q_pos, k_pos, layer)

    monkeypatch.setattr(type(model.decoder.position), "bias", recording)
    with torch.no_grad():
        model(torch.randint(1, cfg.vocab_size, (1, LENGTH)))
    assert seen_rows[: cfg.n_layers * 2] == [8, 5] * cfg.n_layers
    gpu_rows = bias_blocks.bias_block_rows(1, 4, 2**15, 2**15, torch.device("cuda"), cpu_block_bytes=2**10)
    assert gpu_rows == bias_blocks.bias_block_rows(1, 4, 2**15, 2**15, torch.device("cuda"))
