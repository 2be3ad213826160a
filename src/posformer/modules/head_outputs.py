"""The head's side of `Transformer.forward`: which inputs a model can use, its logits and losses (a
pointer-generator's and an encoder span loss's included), and the load-balancing loss of its mixture-of-experts
layers."""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor, nn

from posformer.config import Config
from posformer.modules.heads import TOKEN_HEADS, check_labels, class_loss, mask_padded_logits, span_loss, token_loss
from posformer.modules.moe import load_balancing_loss
from posformer.utils.validation import check_int


def refuse_unused(cfg: Config, **given: Tensor | None) -> None:
    """Raise `ValueError` naming an input that was given but that a model of `cfg` would ignore."""
    unused = {
        "token_type_ids": cfg.type_vocab_size == 0,
        "decoder_input_ids": cfg.arch != "encoder_decoder",
        "decoder_attention_mask": cfg.arch != "encoder_decoder",
        "decoder_position_ids": cfg.arch != "encoder_decoder",
        "start_positions": cfg.head_kind != "span_qa" and not cfg.encoder_span_loss,
        "end_positions": cfg.head_kind != "span_qa" and not cfg.encoder_span_loss,
        "labels": cfg.head_kind in ("span_qa", "none"),
    }
    for name, value in given.items():
        if value is not None and unused[name]:
            raise ValueError(
                f"{name} was given, but this model (arch={cfg.arch!r}, head={cfg.head_kind!r}, "
                f"type_vocab_size={cfg.type_vocab_size}) has no use for it"
            )


def check_head_options(cfg: Config, logits_to_keep: int, return_logits: bool, labels: Tensor | None) -> None:
    """Raise `ValueError` unless `logits_to_keep` is an int >= 0, and 0 without a language-model head or with
    labels (the loss reads every position's logits); and unless `return_logits` is a bool, False only with
    labels and a token head (causal, seq2seq or masked LM)."""
    check_int("logits_to_keep", logits_to_keep, minimum=0)
    if not isinstance(return_logits, bool):
        raise ValueError(f"return_logits must be True or False, got {return_logits!r}")
    if not return_logits and (labels is None or cfg.head_kind not in TOKEN_HEADS):
        raise ValueError(
            f"return_logits=False returns the loss alone: it needs labels and a language-model "
            f"head {TOKEN_HEADS}; this call has labels={'given' if labels is not None else None}"
            f" and head {cfg.head_kind!r}"
        )
    if logits_to_keep and cfg.head_kind not in ("causal_lm", "seq2seq_lm"):
        raise ValueError(
            f"logits_to_keep={logits_to_keep} was given, but this model's head "
            f"({cfg.head_kind!r}) is not a language-model head"
        )
    if logits_to_keep and labels is not None:
        raise ValueError(
            f"logits_to_keep={logits_to_keep} with labels: the loss needs every position's "
            "logits; pass logits_to_keep=0"
        )


class HeadOutput(NamedTuple):
    """What a head gives `Transformer.forward`: its logits and loss; a span head's (or an encoder span loss's)
    start and end logits (B, T). Fields a head does not produce are None."""

    logits: Tensor | None = None
    loss: Tensor | None = None
    start_logits: Tensor | None = None
    end_logits: Tensor | None = None


def apply_head(
    head: nn.Module,
    cfg: Config,
    hidden: Tensor,
    labels: Tensor | None,
    start_positions: Tensor | None,
    end_positions: Tensor | None,
    attention_mask: Tensor | None,
    return_logits: bool,
) -> HeadOutput:
    """The head's logits (span logits of padded positions set to the dtype's minimum: never an answer) and loss
    from hidden (B, T, d_model); without `return_logits` a token head's loss alone."""
    kind = cfg.head_kind
    if kind == "span_qa":
        start_logits, end_logits = head(hidden)
        if attention_mask is not None:
            start_logits = mask_padded_logits(start_logits, attention_mask)
            end_logits = mask_padded_logits(end_logits, attention_mask)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return HeadOutput(loss=loss, start_logits=start_logits, end_logits=end_logits)
    if kind == "classification":
        logits = head(hidden)
        if labels is None:
            return HeadOutput(logits)
        check_labels("labels", labels, logits.shape[:1], cfg.num_labels)
        return HeadOutput(logits, class_loss(logits, labels))
    if not return_logits:
        check_labels("labels", labels, hidden.shape[:2], None)
        return HeadOutput(loss=head.loss(hidden, labels, shift=kind == "causal_lm"))
    if kind == "none":
        return HeadOutput()
    logits = head(hidden)
    if labels is None:
        return HeadOutput(logits)
    check_labels("labels", labels, logits.shape[:2], None)
    return HeadOutput(logits, token_loss(logits, labels, shift=kind == "causal_lm"))


def copy_or_generate(
    model: nn.Module,
    hidden: Tensor,
    memory: Tensor | None,
    source: tuple[Tensor, Tensor | None, Tensor],
    labels: Tensor | None,
    return_logits: bool,
) -> HeadOutput:
    """The logits and loss under `model`'s pointer-generator (`Config.pointer_generator`): the log-probabilities
    (B, T, V) float32 of the mixture of its head's logits and a copy of the encoder's input, for the decoder's hidden
    (B, T, d_model) and the encoder's output `memory` (B, S, d_model). source: (encoder input ids (B, S), their
    attention mask or None, decoder input ids (B, >= T), whose last T are hidden's)."""
    if memory is None:
        raise ValueError("the pointer-generator copies from the encoder's input: it needs an encoder_decoder model")
    source_ids, source_mask, decoder_ids = source
    logits = model.pointer_generator(
        hidden,
        model.head(hidden),
        memory,
        source_ids,
        None if source_mask is None else source_mask.bool(),
        decoder_ids[:, -hidden.shape[1] :],
        model.cfg.decoder_start_token_id,
    )
    loss = None
    if labels is not None:
        check_labels("labels", labels, logits.shape[:2], None)
        loss = token_loss(logits, labels, shift=False)
    return HeadOutput(logits if return_logits else None, loss)


def plus(loss: Tensor | None, term: Tensor) -> Tensor:
    """`loss + term`, or `term` when there is no loss yet."""
    return term if loss is None else loss + term


def with_encoder_span_loss(
    model: nn.Module,
    head: HeadOutput,
    memory: Tensor | None,
    source_mask: Tensor | None,
    start: Tensor | None,
    end: Tensor | None,
) -> HeadOutput:
    """`head` with the start and end logits (B, S) of `model.encoder_span` on the encoder's output `memory`,
    padding at the dtype's minimum, and `Config.encoder_span_loss` times their span loss against start and end
    (B,) added to its loss."""
    if start is None or end is None:
        raise ValueError("the encoder's span loss needs both start_positions and end_positions")
    if memory is None:
        raise ValueError("the encoder's span loss reads the encoder's output: it needs an encoder_decoder model")
    start_logits, end_logits = model.encoder_span(memory)
    if source_mask is not None:
        start_logits = mask_padded_logits(start_logits, source_mask)
        end_logits = mask_padded_logits(end_logits, source_mask)
    auxiliary = model.cfg.encoder_span_loss * span_loss(start_logits, end_logits, start, end)
    return HeadOutput(head.logits, plus(head.loss, auxiliary), start_logits, end_logits)


def aux_loss(
    cfg: Config,
    training: bool,
    loss: Tensor | None,
    encoder_logits: list[Tensor],
    decoder_logits: list[Tensor],
    decoder_mask: Tensor | None,
    length: int,
) -> tuple[Tensor, Tensor | None]:
    """(aux_loss, loss): the load-balancing loss of every router's logits over the real tokens (the encoder's
    rows are real tokens already, packed; the decoder's are B * length, its mask's last `length` columns
    say which), and `loss` plus, while `training`, `Config.router_aux_loss_coef` times it."""
    keep = None if decoder_mask is None else decoder_mask[:, -length:]
    keeps = [None] * len(encoder_logits) + [keep] * len(decoder_logits)
    balance = load_balancing_loss(encoder_logits + decoder_logits, cfg.experts_per_token, keeps)
    if loss is not None and training and cfg.router_aux_loss_coef:
        loss = loss + cfg.router_aux_loss_coef * balance
    return balance, loss
