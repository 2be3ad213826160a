"""The model API refuses inputs that do not fit it with a `ValueError` naming the argument: never an IndexError or a
RuntimeError from deep inside torch, and never a silent broadcast."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from tests.conftest import tiny

IDS = torch.randint(1, 61, (2, 5))


def refused(model: pf.Transformer, message: str, *args, **kwargs) -> None:
    with pytest.raises(ValueError, match=message):
        model(*args, **kwargs)


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder_decoder"])
def test_empty_or_malformed_input_ids(arch: str) -> None:
    model = pf.Transformer(tiny(arch)).eval()
    target = dict(decoder_input_ids=IDS) if arch == "encoder_decoder" else {}
    refused(model, "at least one sequence of at least one token", torch.zeros((2, 0), dtype=torch.long), **target)
    refused(model, "must be a tensor of token ids", [[1, 2, 3]], **target)
    refused(model, "integer token ids", IDS.float(), **target)
    refused(model, r"vocab_size=61", IDS + 100, **target)
    if arch == "encoder_decoder":
        refused(model, "decoder input_ids must hold at least one sequence", IDS, decoder_input_ids=IDS[:, :0])


def test_classification_head_on_an_empty_sequence() -> None:
    model = pf.Transformer(tiny("encoder", head="classification", num_labels=3)).eval()
    refused(model, "at least one sequence of at least one token", torch.zeros((2, 0), dtype=torch.long))


@pytest.mark.parametrize(
    "labels,message",
    [
        (torch.tensor([0, 3]), r"labels must lie in \[0, 3\) or be -100"),
        (torch.tensor([0, -2]), r"labels must lie in \[0, 3\)"),
        (torch.tensor([[0], [1]]), r"labels has shape \(2, 1\); expected \(2,\)"),
        (torch.tensor([0.0, 1.0]), "integer labels"),
        ([0, 1], "must be a tensor"),
    ],
)
def test_classification_labels(labels, message: str) -> None:
    model = pf.Transformer(tiny("encoder", head="classification", num_labels=3)).eval()
    refused(model, message, IDS, labels=labels)
    assert torch.isfinite(model(IDS, labels=torch.tensor([2, -100])).loss)


@pytest.mark.parametrize(
    "labels,message",
    [
        (torch.full((2, 5), 61), r"labels must lie in \[0, 61\)"),
        (torch.full((2, 5), -5), r"labels must lie in \[0, 61\)"),
        (torch.zeros((2, 4), dtype=torch.long), r"labels has shape \(2, 4\); expected \(2, 5\)"),
        (torch.zeros((2, 5)), "integer labels"),
    ],
)
def test_language_model_labels(labels, message: str) -> None:
    refused(pf.Transformer(tiny("decoder")).eval(), message, IDS, labels=labels)


@pytest.mark.parametrize(
    "start,message",
    [
        (torch.tensor([0, 5]), r"start_positions must lie in \[0, 5\)"),
        (torch.tensor([[0], [1]]), r"start_positions has shape \(2, 1\); expected \(2,\)"),
        (torch.tensor([0.0, 1.0]), "start_positions must hold integer labels"),
    ],
)
def test_span_positions(start, message: str) -> None:
    model = pf.Transformer(tiny("encoder", head="span_qa")).eval()
    refused(model, message, IDS, start_positions=start, end_positions=torch.tensor([1, 2]))


def test_token_type_ids_out_of_range() -> None:
    model = pf.Transformer(tiny("encoder", type_vocab_size=2)).eval()
    refused(model, r"token_type_ids must hold values in \[0, 2\)", IDS, token_type_ids=torch.full((2, 5), -1))
    refused(model, r"token_type_ids must hold values in \[0, 2\)", IDS, token_type_ids=torch.full((2, 5), 2))
    refused(model, r"token_type_ids has shape \(2, 4\)", IDS, token_type_ids=torch.zeros((2, 4), dtype=torch.long))


def test_encoder_decoder_batches_must_agree() -> None:
    """A source of batch 2 with decoder inputs of batch 1 was broadcast to batch 2 without a word."""
    model = pf.Transformer(tiny("encoder_decoder")).eval()
    refused(
        model, "decoder input_ids have batch 1; expected the encoder input's batch, 2", IDS, decoder_input_ids=IDS[:1]
    )
    refused(
        model, "decoder input_ids have batch 2; expected the encoder input's batch, 1", IDS[:1], decoder_input_ids=IDS
    )
    assert model(IDS, decoder_input_ids=IDS[:, :3]).logits.shape == (2, 3, 61)


def test_masks_and_positions_of_the_wrong_shape() -> None:
    model = pf.Transformer(tiny("decoder", position="rope")).eval()
    refused(model, r"attention_mask .*has shape \(2, 4\)", IDS, attention_mask=torch.ones(2, 4))
    refused(
        model,
        r"position_ids has shape \(1, 5\); expected \(batch, length\) = \(2, 5\)",
        IDS,
        position_ids=torch.arange(5)[None],
    )


@pytest.mark.parametrize(
    "kind,name",
    [
        ("decoder", "decoder_input_ids"),
        ("decoder", "decoder_attention_mask"),
        ("encoder", "decoder_position_ids"),
        ("decoder", "start_positions"),
        ("decoder", "token_type_ids"),
        ("span", "labels"),
        ("none", "labels"),
    ],
)
def test_inputs_the_model_would_ignore_are_refused(kind: str, name: str) -> None:
    """An input a model has no use for was silently dropped (a span position given to a causal LM gave no loss)."""
    config = {
        "decoder": tiny("decoder"),
        "encoder": tiny("encoder"),
        "span": tiny("encoder", head="span_qa"),
        "none": tiny("decoder", head="none"),
    }[kind]
    refused(pf.Transformer(config).eval(), f"{name} was given, but this model", IDS, **{name: IDS})
