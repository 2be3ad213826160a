"""PaTH and stick-breaking in blocks of queries at a length that spans several blocks: the logits and every gradient
equal those of one block of every query, with and without gradients, with left padding, and cached decoding after a
blockwise prefill equals the full pass.

The block budget (`modules.bias_blocks.BIAS_BYTES`) is shrunk so that 40 tokens run in blocks of 6 queries, which
start inside PaTH's chunks and cross them: its chunks are cut to 4 tokens and its spans to 2 chunks, so that a block
reads keys carried across chunks and across whole spans, from the work on the keys shared by every block
(`ReadsHidden.shared_key_work`). In training the blocks are checkpointed (stick-breaking's through
`ops.weighted_attention`, PaTH's through `modules.bias_blocks`) and their gradients reach the shared work.
"""

from __future__ import annotations

import pytest
import torch
from test_positions_conformance import cached_left_padded_steps, config

import posformer as pf
import posformer.modules.bias_blocks as bias_blocks
import posformer.positions.path as path_module

LENGTH, ROWS, BATCH = 40, 6, 2


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(path_module, "CHUNK", 4)
    monkeypatch.setattr(path_module, "SPAN", 2)


def _model(name: str) -> pf.Transformer:
    cfg = config(name, "decoder", max_positions=2 * LENGTH, attention_dropout=0.0, dropout=0.0)
    torch.manual_seed(0)
    return pf.Transformer(cfg).double()


def _blocks_of(monkeypatch: pytest.MonkeyPatch, rows: int, model: pf.Transformer) -> None:
    """Every attention of this model's shape in blocks of `rows` queries."""
    cfg = model.cfg
    row_bytes = BATCH * cfg.n_heads * LENGTH * 4
    monkeypatch.setitem(bias_blocks.BIAS_BYTES, "cpu", (rows * row_bytes, rows * row_bytes))
    monkeypatch.setattr(bias_blocks, "MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(pf.positions.get(cfg.position), "cpu_bias_block_bytes", None)
    assert bias_blocks.bias_block_rows(BATCH, cfg.n_heads, LENGTH, LENGTH, torch.device("cpu")) == rows


def _inputs(model: pf.Transformer, padded: bool) -> dict:
    ids = torch.randint(1, model.cfg.vocab_size, (BATCH, LENGTH))
    if not padded:
        return {"input_ids": ids}
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    mask[0, :9] = 0  # left padding: the mask is no longer plain causal, and every block reads every key
    return {"input_ids": ids, "attention_mask": mask}


def _logits_and_grads(model: pf.Transformer, kwargs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(**kwargs, labels=kwargs["input_ids"])
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left-padded"])
@pytest.mark.parametrize("name", ["path", "stick_breaking"])
def test_blocks_across_chunks_give_the_logits_and_gradients_of_one_block(name, padded, monkeypatch) -> None:
    model = _model(name)
    kwargs = _inputs(model, padded)
    whole_logits, whole_grads = _logits_and_grads(model, kwargs)
    _blocks_of(monkeypatch, ROWS, model)
    block_logits, block_grads = _logits_and_grads(model, kwargs)
    torch.testing.assert_close(block_logits, whole_logits, atol=1e-10, rtol=1e-10)
    with torch.no_grad():  # without gradients each block writes its rows of one output
        torch.testing.assert_close(model(**kwargs).logits, whole_logits, atol=1e-10, rtol=1e-10)
    assert block_grads.keys() == whole_grads.keys()
    if name == "path":  # its own weights get gradients through the work on the keys that the blocks share
        assert {"decoder.position.w_weight", "decoder.position.beta_weight"} <= block_grads.keys()
    for param, grad in whole_grads.items():
        torch.testing.assert_close(block_grads[param], grad, atol=1e-10, rtol=1e-8, msg=param)


@pytest.mark.parametrize("name", ["path", "stick_breaking"])
def test_a_blockwise_prefill_then_cached_steps_give_the_full_forward(name, monkeypatch) -> None:
    model = _model(name).eval()
    ids = torch.randint(1, model.cfg.vocab_size, (BATCH, LENGTH))
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    mask[0, :5] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(ids, attention_mask=mask, position_ids=pos).logits
        _blocks_of(monkeypatch, ROWS, model)
        stepped = cached_left_padded_steps(model, ids, mask, pos, prefix=29)
    keep = mask.bool()
    torch.testing.assert_close(stepped[keep], full[keep], atol=1e-9, rtol=1e-9)
