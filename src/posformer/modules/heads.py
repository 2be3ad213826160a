"""Output heads and their losses. Every loss ignores label -100."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer.config import Config
from posformer.modules.feedforward import ACTIVATION_FNS
from posformer.ops.cross_entropy import token_cross_entropy
from posformer.ops.linear import Linear
from posformer.ops.linear_cross_entropy import linear_token_cross_entropy
from posformer.utils.tensor_checks import check_in_range

IGNORE_INDEX = -100
TOKEN_HEADS = ("causal_lm", "seq2seq_lm", "masked_lm")  # heads with a logit per position and token


def prediction_transform(cfg: Config) -> tuple[Linear, Callable[[Tensor], Tensor], nn.LayerNorm]:
    """BERT's prediction-head transform, LayerNorm(act(dense(h))), as its three parts: dense (d_model -> d_model,
    a bias with `Config.head_transform_bias`), the activation (`Config.activation`, GELU for a gated one) and
    LayerNorm (a bias with `Config.norm_bias`)."""
    dense = Linear(cfg.d_model, cfg.d_model, bias=cfg.head_transform_bias)
    act = ACTIVATION_FNS.get(cfg.activation, ACTIVATION_FNS["gelu"])
    return dense, act, nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.norm_bias)


class LMHead(nn.Module):
    """Hidden states to vocabulary logits: (B, T, d_model) -> (B, T, vocab). Causal and seq2seq LM.

    With `Config.head_transform` the hidden states first pass BERT's prediction-head transform,
    LayerNorm(act(dense(h))) with dense (d_model -> d_model) (BertLMHeadModel's
    `cls.predictions.transform`). With `Config.scale_tied_head` (T5 v1.0) and tied embeddings
    the hidden states are multiplied by d_model**-0.5; `Config.head_bias` adds a bias (Marian, BERT).
    `Config.logit_scale` (Cohere) multiplies the logits: without a bias, the same as multiplying h.
    `Config.logit_softcap` c caps them: c * tanh(logits / c) (Gemma 4); its loss then holds the logits.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.transform = cfg.head_transform
        if self.transform:
            self.dense, self.act, self.norm = prediction_transform(cfg)
        self.proj = Linear(cfg.d_model, cfg.vocab_size, bias=cfg.head_bias)
        tied_scale = cfg.d_model**-0.5 if cfg.scale_tied_head and cfg.tie_embeddings else 1.0
        self.input_scale = tied_scale * cfg.logit_scale
        self.softcap = cfg.logit_softcap

    def forward(self, h: Tensor) -> Tensor:
        logits = self.proj(self.features(h))
        return logits if self.softcap is None else self.softcap * torch.tanh(logits / self.softcap)

    def features(self, h: Tensor) -> Tensor:
        """What the vocabulary projection reads: h after the transform and the tied-head scaling, (B, T, d_model)."""
        if self.transform:
            h = self.norm(self.act(self.dense(h)))
        return h * self.input_scale if self.input_scale != 1.0 else h

    def loss(self, h: Tensor, labels: Tensor, shift: bool) -> Tensor:
        """`token_loss` of this head's logits, computed without them (`linear_token_cross_entropy`).

        h: (B, T, d_model); labels: (B, T) -> a scalar. With a soft cap, from the capped logits.
        """
        if self.softcap is not None:
            return token_loss(self(h), labels, shift)
        targets = token_targets(labels, shift)
        features = self.features(h)
        total = linear_token_cross_entropy(
            features.reshape(-1, features.shape[-1]), self.proj.weight, self.proj.bias, targets, IGNORE_INDEX
        )
        return mean_over_labels(total, targets)


class MaskedLMHead(LMHead):
    """The MLM head, without tied-head scaling. `Config.mlm_head` "bert": BERT's, dense, activation, LayerNorm,
    then the vocabulary projection with a bias, whatever the config says; "lm": the `LMHead` of
    `Config.head_transform` and `Config.head_bias` (EuroBERT: the projection alone)."""

    def __init__(self, cfg: Config) -> None:
        bert = cfg.mlm_head == "bert"
        transform, bias = cfg.head_transform or bert, cfg.head_bias or bert
        plain = dict(scale_tied_head=False, logit_scale=1.0, logit_softcap=None)
        super().__init__(cfg.replace(head_transform=transform, head_bias=bias, **plain))


class SpanQAHead(nn.Module):
    """Extractive QA: (B, T, d_model) -> start and end logits, each (B, T). The span_qa head with
    `Config.head_transform` first applies the prediction-head transform (ModernBertForQuestionAnswering); an
    encoder-decoder's encoder span head (`Config.encoder_span_loss`) never does."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.transform = cfg.head_transform and cfg.head_kind == "span_qa"
        if self.transform:
            self.dense, self.act, self.norm = prediction_transform(cfg)
        self.proj = Linear(cfg.d_model, 2)

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor]:
        if self.transform:
            h = self.norm(self.act(self.dense(h)))
        start, end = self.proj(h).unbind(-1)
        return start, end


class ClassificationHead(nn.Module):
    """Sequence classification from the first token: pooler (dense + tanh), dropout, linear.

    (B, T, d_model) -> (B, num_labels).
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.pooler = Linear(cfg.d_model, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.proj = Linear(cfg.d_model, cfg.num_labels)

    def forward(self, h: Tensor) -> Tensor:
        return self.proj(self.dropout(self.pooler(h[:, 0]).tanh()))


def build_head(cfg: Config) -> nn.Module | None:
    kind = cfg.head_kind
    if kind in ("causal_lm", "seq2seq_lm"):
        return LMHead(cfg)
    return {"masked_lm": MaskedLMHead, "span_qa": SpanQAHead, "classification": ClassificationHead}.get(
        kind, lambda cfg: None
    )(cfg)


def loss_only(head_kind: str) -> dict[str, bool]:
    """The forward arguments that ask a model with this head for its training loss alone: `return_logits=False`
    for a token head (its (B, T, V) logits are never held), none for the others (their logits are small)."""
    return {"return_logits": False} if head_kind in TOKEN_HEADS else {}


def token_loss(logits: Tensor, labels: Tensor, shift: bool) -> Tensor:
    """Mean cross-entropy over tokens whose label is not -100.

    logits: (B, T, V), labels: (B, T). With `shift`, position t predicts label t+1 (causal LM).
    A batch with no label to predict (all -100, or one token under the shift)
    has loss 0, not NaN.
    """
    targets = token_targets(labels, shift)
    return mean_over_labels(token_cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, IGNORE_INDEX), targets)


def token_targets(labels: Tensor, shift: bool) -> Tensor:
    """The label of each position's prediction, flattened: labels (B, T) -> (B * T,). With `shift` (causal LM)
    position t predicts label t+1 and the last position -100: the labels move, not the (large) logits."""
    if shift:
        labels = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
    return labels.reshape(-1)


def mean_over_labels(total: Tensor, targets: Tensor) -> Tensor:
    """A summed loss over the targets (N,) divided by how many are not -100 (at least 1: no labels -> 0)."""
    return total / (targets != IGNORE_INDEX).sum().clamp(min=1)


def mask_padded_logits(logits: Tensor, attention_mask: Tensor) -> Tensor:
    """Span logits (B, T) with padded positions (attention_mask (B, T) 0) at the dtype's minimum: never an
    answer, and no probability mass in the span loss."""
    return logits.masked_fill(~attention_mask.bool(), torch.finfo(logits.dtype).min)


def check_labels(name: str, labels: Tensor, shape: tuple[int, ...], classes: int | None) -> None:
    """Raise `ValueError` unless `labels` is an integer tensor of `shape` whose values lie in [0, classes) or are
    -100 (ignored); `name` is the argument named in the message. `classes` None: the range is checked by the loss
    (`token_cross_entropy`)."""
    if not isinstance(labels, Tensor):
        raise ValueError(f"{name} must be a tensor of shape {shape}, got {type(labels).__name__}")
    if tuple(labels.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(labels.shape)}; expected {tuple(shape)}")
    if labels.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must hold integer labels, got dtype {labels.dtype}")
    if classes is not None:
        check_in_range(labels, 0, classes, f"{name} must lie in [0, {classes}) or be {IGNORE_INDEX}", IGNORE_INDEX)


def span_loss(start_logits: Tensor, end_logits: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """(CE(start) + CE(end)) / 2. logits: (B, T); start, end: (B,) token indices, -100 to ignore."""
    batch, length = start_logits.shape
    for name, value in (("start_positions", start), ("end_positions", end)):
        check_labels(name, value, (batch,), length)
    return (class_loss(start_logits, start) + class_loss(end_logits, end)) / 2


def class_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of logits (B, C) against labels (B,) over the rows whose label is not -100;
    0, not NaN, when every label is -100."""
    total = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)
