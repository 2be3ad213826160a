"""The head's side of `Transformer.forward`: which inputs a model can use, its logits and losses (a
pointer-generator's and an encoder span loss's included), and the load-balancing loss of its mixture-of-experts
layers."""

from __future__ import annotations

from torch import Tensor, nn

from posformer.config import Config
from posformer.modules.heads import TOKEN_HEADS, check_labels, class_loss, mask_padded_logits, span_loss, token_loss
from posformer.modules.moe import load_balancing_loss
from posformer.modules.outputs import ModelOutput
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


def apply_head(
    head: nn.Module,
    cfg: Config,
    out: ModelOutput,
    hidden: Tensor,
    labels: Tensor | None,
    start_positions: Tensor | None,
    end_positions: Tensor | None,
    attention_mask: Tensor | None,
    return_logits: bool,
) -> None:
    """`out`'s logits (span logits of padded positions set to the dtype's minimum: never an answer) and loss from
    hidden (B, T, d_model); without `return_logits` a token head's loss alone."""
    kind = cfg.head_kind
    if kind == "span_qa":
        out.start_logits, out.end_logits = head(hidden)
        if attention_mask is not None:
            out.start_logits = mask_padded_logits(out.start_logits, attention_mask)
            out.end_logits = mask_padded_logits(out.end_logits, attention_mask)
        if start_positions is not None and end_positions is not None:
            out.loss = span_loss(out.start_logits, out.end_logits, start_positions, end_positions)
    elif kind == "classification":
        out.logits = head(hidden)
        if labels is not None:
            check_labels("labels", labels, out.logits.shape[:1], cfg.num_labels)
            out.loss = class_loss(out.logits, labels)
    elif not return_logits:
        check_labels("labels", labels, hidden.shape[:2], None)
        out.loss = head.loss(hidden, labels, shift=kind == "causal_lm")
    elif kind != "none":
        out.logits = head(hidden)
        if labels is not None:
            check_labels("labels", labels, out.logits.shape[:2], None)
            out.loss = token_loss(out.logits, labels, shift=kind == "causal_lm")


def copy_or_generate(
    model: nn.Module,
    out: ModelOutput,
    hidden: Tensor,
    source: tuple[Tensor, Tensor | None, Tensor],
    labels: Tensor | None,
    return_logits: bool,
) -> None:
    """`out`'s logits and loss under `model`'s pointer-generator (`Config.pointer_generator`): the log-probabilities
    (B, T, V) float32 of the mixture of its head's logits and a copy of the encoder's input, for the decoder's hidden
    (B, T, d_model). source: (encoder input ids (B, S), their attention mask or None, decoder input ids (B, >= T), whose
    last T are hidden's). `out.encoder_last_hidden_state` is the encoder's output."""
    source_ids, source_mask, decoder_ids = source
    out.logits = model.pointer_generator(
        hidden,
        model.head(hidden),
        out.encoder_last_hidden_state,
        source_ids,
        None if source_mask is None else source_mask.bool(),
        decoder_ids[:, -hidden.shape[1] :],
        model.cfg.decoder_start_token_id,
    )
    if labels is not None:
        check_labels("labels", labels, out.logits.shape[:2], None)
        out.loss = token_loss(out.logits, labels, shift=False)
    if not return_logits:
        out.logits = None


def add_encoder_span_loss(
    model: nn.Module,
    out: ModelOutput,
    source_mask: Tensor | None,
    start: Tensor | None,
    end: Tensor | None,
) -> None:
    """`out`'s start and end logits (B, S) from `model.encoder_span` on the encoder's output, padding at the dtype's
    minimum, and `Config.encoder_span_loss` times their span loss against start and end (B,) added to `out.loss`."""
    if start is None or end is None:
        raise ValueError("the encoder's span loss needs both start_positions and end_positions")
    start_logits, end_logits = model.encoder_span(out.encoder_last_hidden_state)
    if source_mask is not None:
        start_logits = mask_padded_logits(start_logits, source_mask)
        end_logits = mask_padded_logits(end_logits, source_mask)
    out.start_logits, out.end_logits = start_logits, end_logits
    auxiliary = model.cfg.encoder_span_loss * span_loss(start_logits, end_logits, start, end)
    out.loss = auxiliary if out.loss is None else out.loss + auxiliary


def add_aux_loss(
    cfg: Config,
    training: bool,
    out: ModelOutput,
    encoder_logits: list[Tensor],
    decoder_logits: list[Tensor],
    decoder_mask: Tensor | None,
    length: int,
) -> None:
    """`out.aux_loss`: the load-balancing loss of every router's logits over the real tokens (the encoder's
    rows are real tokens already, packed; the decoder's are B * length, its mask's last `length` columns
    say which); while `training`, `out.loss` gains `Config.router_aux_loss_coef` times it."""
    keep = None if decoder_mask is None else decoder_mask[:, -length:]
    keeps = [None] * len(encoder_logits) + [keep] * len(decoder_logits)
    out.aux_loss = load_balancing_loss(encoder_logits + decoder_logits, cfg.experts_per_token, keeps)
    if out.loss is not None and training and cfg.router_aux_loss_coef:
        out.loss = out.loss + cfg.router_aux_loss_coef * out.aux_loss
