"""Activation checkpointing (`Transformer.set_activation_checkpointing`, `trainer.activation_checkpointing`): for
every registered encoding and architecture, the loss and every gradient equal those of the plain backward pass,
dropout included; a mixture of experts' auxiliary loss too; nothing changes in eval mode."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from tests.positions.test_positions_conformance import CASES, config, inputs


def _loss_and_grads(model: pf.Transformer, batch: dict, checkpointed: bool) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    model.set_activation_checkpointing(checkpointed)
    torch.manual_seed(1)  # the dropout masks
    labels = batch.get("decoder_input_ids", batch["input_ids"])
    loss = model(**batch, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same(model: pf.Transformer, batch: dict) -> None:
    plain_loss, plain = _loss_and_grads(model.train(), batch, checkpointed=False)
    loss, grads = _loss_and_grads(model, batch, checkpointed=True)
    torch.testing.assert_close(loss, plain_loss, rtol=0, atol=0)
    assert grads.keys() == plain.keys() and plain
    for name in plain:
        torch.testing.assert_close(grads[name], plain[name], rtol=1e-6, atol=1e-7, msg=name)


@pytest.mark.parametrize("name, arch", CASES)
def test_checkpointed_gradients_equal_the_plain_backward(name: str, arch: str) -> None:
    model = pf.Transformer(config(name, arch, init_std=0.1))
    _assert_same(model, inputs(model.cfg))


def test_dropout_and_experts_recompute_the_same() -> None:
    cfg = config("rope", "decoder", dropout=0.2, attention_dropout=0.1, n_experts=4, experts_per_token=2)
    model = pf.Transformer(cfg.replace(router_aux_loss_coef=0.01, attn_impl="eager"))
    _assert_same(model, inputs(model.cfg))


def test_eval_mode_and_no_grad_are_unchanged() -> None:
    model = pf.Transformer(config("alibi", "decoder")).eval()
    batch = inputs(model.cfg)
    plain = model(**batch).logits
    model.set_activation_checkpointing(True)
    torch.testing.assert_close(model(**batch).logits, plain, rtol=0, atol=0)
