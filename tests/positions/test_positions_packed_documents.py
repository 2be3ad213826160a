"""Packed documents (`document_ids`), for every registered encoding in an encoder and a decoder: each document of a
packed row (rows padded to one length) has the logits and the gradients it has alone. Key smearing, MoE and the
eager kernel likewise; a causal LM's loss on a packed row ignores each document's first label."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.modules.heads import IGNORE_INDEX
from tests.positions.test_positions_conformance import CASES, config

LENGTHS = [(3, 6, 4), (7, 5)]  # two rows; the second padded to the first's length
PACKED = [(name, arch) for name, arch in CASES if arch != "encoder_decoder"]


def _packed(vocab: int) -> tuple[list[list[torch.Tensor]], dict[str, torch.Tensor]]:
    """The documents of each row and the packed batch: input_ids, document_ids, attention_mask (B, T)."""
    width = max(sum(row) for row in LENGTHS)
    documents = [[torch.randint(1, vocab, (n,)) for n in row] for row in LENGTHS]
    ids = torch.zeros(len(LENGTHS), width, dtype=torch.long)
    doc = torch.full_like(ids, -1)
    keep = torch.zeros_like(ids)
    for b, row in enumerate(documents):
        start = 0
        for d, tokens in enumerate(row):
            ids[b, start : start + len(tokens)] = tokens
            doc[b, start : start + len(tokens)], keep[b, start : start + len(tokens)] = d, 1
            start += len(tokens)
    return documents, {"input_ids": ids, "document_ids": doc, "attention_mask": keep}


def _check(model: pf.Transformer) -> None:
    documents, batch = _packed(model.cfg.vocab_size)
    width = batch["input_ids"].shape[1]
    weight = torch.randn(width, model.cfg.vocab_size if model.cfg.head_kind != "none" else model.cfg.d_model)
    field = "logits" if model.cfg.head_kind != "none" else "last_hidden_state"
    packed_out = getattr(model(**batch), field)
    (packed_out * weight * batch["attention_mask"][..., None]).sum().backward()  # the documents' outputs
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    for b, row in enumerate(documents):
        start = 0
        for tokens in row:
            alone = getattr(model(tokens[None]), field)
            torch.testing.assert_close(packed_out[b, start : start + len(tokens)], alone[0], rtol=1e-4, atol=1e-5)
            (alone[0] * weight[start : start + len(tokens)]).sum().backward()
            start += len(tokens)
    alone_grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert alone_grads.keys() == packed_grads.keys()
    # float32 sums in another order: the error scales with the largest gradient (a gradient that is zero in exact
    # arithmetic, as a bias softmax cancels, is float noise in both)
    scale = max(float(g.abs().max()) for g in alone_grads.values())
    for name, grad in alone_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-6 * scale, msg=name)


@pytest.mark.parametrize("name, arch", PACKED)
def test_a_packed_document_has_the_logits_and_gradients_it_has_alone(name: str, arch: str) -> None:
    torch.manual_seed(0)
    model = pf.Transformer(config(name, arch, dropout=0.0)).eval()
    refusal = pf.positions.get(name).packing_refusal
    if refusal is not None:
        with pytest.raises(ValueError, match=rf"document_ids: position='{name}' cannot pack documents: "):
            _check(model)
        return
    _check(model)


@pytest.mark.parametrize(
    "overrides",
    [
        {"key_smear": True},
        {"attn_impl": "eager", "position": "alibi"},
        {"n_experts": 3, "experts_per_token": 2},
        {"sliding_window": 4},
    ],
    ids=["key_smear", "eager", "experts", "window"],
)
def test_packing_with_other_parts(overrides: dict) -> None:
    torch.manual_seed(0)
    _check(pf.Transformer(config(overrides.pop("position", "rope"), "decoder", **overrides)).eval())


def test_a_packed_causal_lm_ignores_each_documents_first_label() -> None:
    torch.manual_seed(0)
    model = pf.Transformer(config("rope", "decoder")).eval()
    documents, batch = _packed(model.cfg.vocab_size)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
    packed = model(**batch, labels=labels).loss
    total = sum(model(d[None], labels=d[None]).loss * (len(d) - 1) for row in documents for d in row)
    count = sum(len(d) - 1 for row in documents for d in row)
    torch.testing.assert_close(packed, total / count)


def test_document_ids_are_refused_where_they_cannot_apply() -> None:
    model = pf.Transformer(config("rope", "decoder"))
    ids = torch.randint(1, 50, (1, 6))
    with pytest.raises(ValueError, match=r"document_ids .* without a cache"):
        model(ids, document_ids=torch.zeros_like(ids), cache=model.new_cache())
    with pytest.raises(ValueError, match=r"document_ids"):
        model(ids, document_ids=torch.zeros(1, 5, dtype=torch.long))
