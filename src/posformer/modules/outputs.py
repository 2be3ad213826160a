"""The output record of `Transformer.forward`."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from posformer.modules.cache import Cache


@dataclass
class ModelOutput:
    """What a forward pass returns; fields a head does not produce stay None.

    logits: (B, T, vocab) for LM heads, (B, num_labels) for classification.
    start_logits, end_logits: (B, T) for span QA.
    last_hidden_state: (B, T, d_model), the final stack's output (the decoder's in encoder-decoder).
    encoder_last_hidden_state: (B, S, d_model) for encoder-decoder.
    attentions: with output_attentions, per layer the (B, H, T, S) probabilities
      (self-attention, then cross-attention for decoder layers that have it).
    aux_loss: () for a model with mixture-of-experts layers (`Config.n_experts`): the routers' load-balancing
      loss over the real tokens of this forward (`modules.moe.load_balancing_loss`); a training loss includes
      `Config.router_aux_loss_coef` times it.
    """

    logits: Tensor | None = None
    loss: Tensor | None = None
    aux_loss: Tensor | None = None
    last_hidden_state: Tensor | None = None
    encoder_last_hidden_state: Tensor | None = None
    start_logits: Tensor | None = None
    end_logits: Tensor | None = None
    cache: Cache | None = None
    attentions: list[Tensor] = field(default_factory=list)
