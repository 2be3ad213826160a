"""Forgetting attention (FoX; Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
ICLR 2025): a data-dependent ALiBi.

Each token t writes a forget gate per head, f_t = sigmoid(w_h . x_t + b_h), from the attention's input x_t; the
logit of query i and key j <= i gains the log of every gate after the key up to the query:

    logits[b, h, i, j] = scale * q_i . k_j + sum_{t = j+1 .. i} log f_t = scale * q_i . k_j + c_i - c_j,
    c_i = sum_{t <= i} log f_t

No other position information: gates of 1 give NoPE exactly, and a constant gate f gives ALiBi's bias
-m (i - j) with slope m = -log f. The gates count the tokens between key and query, so FoX needs a causal stack:
arch "decoder" only. `gate_bias_init` (default 5: f ~ 0.993 at the start, x-transformers' `DataDependentAlibi`)
initialises b; w starts from N(0, init_std), one (w, b) per layer and head.

The bias depends on the hidden states, which no hook of `PositionEncoding` sees: the attention asks the encoding
for each token's term (`ReadsHidden.token_terms`), sums them along the sequence with a KV cache's sum as the carry
(`running_sums`), and has `sums_bias` (or `sums_score_mod` under FlexAttention) turn the sums of its queries and
keys into the bias. The cache keeps every key's sum, so cached decoding adds the same c_i - c_j as a full pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer.ops.flex import ScoreMod
from posformer.positions.base import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes


@runtime_checkable
class ReadsHidden(Protocol):
    """An encoding whose bias depends on each token's hidden state, through a term per token summed along the
    sequence (FoX's log forget gates).

    `token_terms(x, layer)`: x (..., d_model), the attention's input -> (..., H) float32, each token's term per
    head. `sums_bias(c_q, c_k, layer)`: the running sums at the queries (B, H, Tq) and keys (B, H, Tk) -> the bias
    (B, H, Tq, Tk); `sums_score_mod(c_q, c_k, layer)` the same as a FlexAttention score_mod.
    """

    def token_terms(self, x: Tensor, layer: int) -> Tensor: ...

    def sums_bias(self, c_q: Tensor, c_k: Tensor, layer: int) -> Tensor: ...

    def sums_score_mod(self, c_q: Tensor, c_k: Tensor, layer: int) -> ScoreMod: ...


def running_sums(terms: Tensor, carry: Tensor | None) -> Tensor:
    """terms (B, H, T) -> their cumulative sums along T, each plus carry (B, H, 1) (the sum before the first term;
    None: 0), in float32 or wider."""
    sums = terms.to(torch.promote_types(terms.dtype, torch.float32)).cumsum(-1)
    return sums if carry is None else sums + carry


@register("fox")
class ForgettingAttention(PositionEncoding):
    """FoX's forget-gate bias c_i - c_j (see the module docstring). position_params: gate_bias_init."""

    defaults = {"gate_bias_init": 5.0}
    causal_only = True

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        init = params["gate_bias_init"]
        if not isinstance(init, (int, float)) or isinstance(init, bool) or not abs(init) < float("inf"):
            raise cls.param_error(cls.name, "gate_bias_init", init, "a finite number (the gates' initial logit)")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.gate_weight = nn.Parameter(torch.randn(n_layers, sizes.n_heads, sizes.d_model) * sizes.init_std)
        self.gate_bias = nn.Parameter(torch.full((n_layers, sizes.n_heads), float(self.params["gate_bias_init"])))

    @classmethod
    def has_bias(cls) -> bool:
        """True: the bias comes through `sums_bias`, not the `bias` hook."""
        return True

    def token_terms(self, x: Tensor, layer: int) -> Tensor:
        """x (..., d_model) -> log f (..., H) in float32 or wider, each token's log forget gate per head."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        weight, bias = self.gate_weight[layer].to(dtype), self.gate_bias[layer].to(dtype)
        return F.logsigmoid(F.linear(x.to(dtype), weight, bias))

    def sums_bias(self, c_q: Tensor, c_k: Tensor, layer: int) -> Tensor:
        """c_q (B, H, Tq), c_k (B, H, Tk) -> c_q[i] - c_k[j]: (B, H, Tq, Tk) in their dtype (positive above the
        diagonal, where the causal mask hides the pairs)."""
        return c_q[..., :, None] - c_k[..., None, :]

    def sums_score_mod(self, c_q: Tensor, c_k: Tensor, layer: int) -> ScoreMod:
        """`sums_bias` as a FlexAttention score_mod, reading the sums (B, H, T) at each pair."""

        def add_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + (c_q[b, h, q_idx] - c_k[b, h, kv_idx]).to(score.dtype)

        return add_bias
