"""Stick-breaking attention (Tan, Shen, Yang, Panda, Courville, ICLR 2025, "Scaling Stick-Breaking Attention"):
no position encoding; the order of the keys shapes the weights instead of a softmax.

Each key j before query i gets beta_ij = sigmoid(z_ij), z the scaled score, and the weight
w_ij = beta_ij * prod over the keys k between them (j < k < i) of (1 - beta_ik): the nearest keys break off
their share of a stick of length 1 first, and each farther key gets a share of what is left. The weights sum to
at most 1; what is left goes nowhere. In log space: log w_ij = log sigmoid(z_ij) + sum_{k > j} log sigmoid(-z_ik),
a reverse cumulative sum over the keys of each row, shifted by one key (not less each key's own term: that
difference cancels in float32 and can push a row's sum past 1). Keys the mask hides (padding, outside a sliding
window) take no share and break nothing. `attend_current` lets a query weigh its own key (k < i becomes k <= i,
j <= i); by default it does not, as in the authors' reference code, so the first token's output is zero.

The hook (`ReplacesSoftmax`): `key_weights` turns the scores of a block of queries into weights, and self-attention
runs them through `ops.weighted_attention` (blocks of queries at long lengths, the KV cache as for any encoding).
Neither SDPA nor FlexAttention can take it: the weights are not a softmax, and a score_mod sees one pair at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer.positions.contract import AttentionKind, PositionEncoding
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes


@register("stick_breaking")
class StickBreaking(PositionEncoding):
    """Stick-breaking attention (see the module docstring). Parameters: `attend_current` (bool, default False)."""

    attention = AttentionKind.OWN_WEIGHTS
    flex_refusal = "its weights are a product over the keys between query and key, which no score_mod can form"

    defaults = {"attend_current": False}
    sdpa_compatible = False
    causal_only = True  # the stick is broken from the query back through the keys before it

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        if not isinstance(params["attend_current"], bool):
            raise cls.param_error(cls.name, "attend_current", params["attend_current"], "True or False")

    def key_weights(self, scores: Tensor, seen: Tensor, q_index: Tensor, layer: int) -> Tensor:
        """scores: (B, H, Tq, Tk) float32, the scaled q.k; seen: (B or 1, 1, Tq, Tk) bool, the keys the mask lets
        each query see; q_index: (Tq,) each query's index among the keys -> weights (B, H, Tq, Tk)."""
        cols = torch.arange(scores.shape[-1], device=scores.device)
        before = cols <= q_index[:, None] if self.params["attend_current"] else cols < q_index[:, None]
        hidden = ~(seen & before)
        log_rest = F.logsigmoid(-scores).masked_fill(hidden, 0.0)  # log(1 - beta) of each key that breaks the stick
        suffix = log_rest.flip(-1).cumsum(-1).flip(-1)  # sum over the keys k >= j
        after = F.pad(suffix[..., 1:], (0, 1))  # over k > j: shifted, not suffix - log_rest, which cancels
        return (F.logsigmoid(scores) + after).exp().masked_fill(hidden, 0.0)
