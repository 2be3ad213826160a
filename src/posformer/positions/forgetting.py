"""Forgetting attention (FoX; Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
ICLR 2025): a data-dependent ALiBi, and its per-row form.

`fox`: each token t writes a forget gate per head, f_t = sigmoid(w_h . x_t + b_h), from the attention's input x_t;
the logit of query i and key j <= i gains the log of every gate after the key up to the query:

    logits[b, h, i, j] = scale * q_i . k_j + sum_{t = j+1 .. i} log f_t = scale * q_i . k_j + c_i - c_j,
    c_i = sum_{t <= i} log f_t

No other position information: gates of 1 give NoPE exactly, and a constant gate f gives ALiBi's bias
-m (i - j) with slope m = -log f. `gate_bias_init` (default 5: f ~ 0.993 at the start, x-transformers'
`DataDependentAlibi`) initialises b; w starts from N(0, init_std), one (w, b) per layer and head.

`fox_per_row` (x-transformers' `PerRowDataDependentAlibi`): the gate depends on the query as well, through small
query and key vectors u_i, v_t of `gate_dim` per head projected from x (no bias):

    logits[b, h, i, j] = scale * q_i . k_j + sum_{t = j .. i-1} log sigmoid(u_i . v_t / sqrt(gate_dim))

Both count the tokens between key and query, so they need a causal stack: arch "decoder" only.

The bias depends on the hidden states, which no hook of `PositionEncoding` sees: the attention asks the encoding
for each token's terms (`ReadsHidden.token_terms`: a query part, or None, and a key part), keeps the key parts
beside the keys in the KV cache, and has `terms_bias` (or `terms_score_mod` under FlexAttention) turn them into
the bias. So cached decoding computes the bias from exactly the terms a full pass uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer.ops.flex import ScoreMod
from posformer.positions.contract import AttentionKind, PositionEncoding
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes


def wide(x: Tensor) -> torch.dtype:
    """float32, or x's dtype when wider (float64)."""
    return torch.promote_types(x.dtype, torch.float32)


class HiddenStateBias(PositionEncoding):
    """What both forms share: decoder only, a bias (through `ReadsHidden`, not the `bias` hook)."""

    attention = AttentionKind.HIDDEN_TERMS
    adds_bias = True

    causal_only = True

    def shared_key_work(self, k_terms: Tensor, k: Tensor, layer: int) -> tuple[Tensor, ...] | None:
        """Nothing that the blocks of queries share (PaTH has): FoX's bias of a block reads its key terms alone."""
        return None


@register("fox")
class ForgettingAttention(HiddenStateBias):
    """FoX's forget-gate bias c_i - c_j (see the module docstring). position_params: gate_bias_init."""

    flex_form = "score_mod"

    defaults = {"gate_bias_init": 5.0}

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        init = params["gate_bias_init"]
        if not isinstance(init, (int, float)) or isinstance(init, bool) or not abs(init) < math.inf:
            raise cls.param_error(cls.name, "gate_bias_init", init, "a finite number (the gates' initial logit)")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.gate_weight = nn.Parameter(torch.randn(n_layers, sizes.n_heads, sizes.d_model) * sizes.init_std)
        self.gate_bias = nn.Parameter(torch.full((n_layers, sizes.n_heads), float(self.params["gate_bias_init"])))

    def log_gates(self, x: Tensor, layer: int) -> Tensor:
        """x (..., d_model) -> log f (..., H): each token's log forget gate per head."""
        dtype = wide(x)
        weight, bias = self.gate_weight[layer].to(dtype), self.gate_bias[layer].to(dtype)
        return F.logsigmoid(F.linear(x.to(dtype), weight, bias))

    def token_terms(self, x: Tensor, layer: int) -> tuple[None, Tensor]:
        """x (B, T, d_model) -> (None, log f (B, H, T, 1))."""
        return None, self.log_gates(x, layer).transpose(1, 2)[..., None]

    @staticmethod
    def running_sums(k_terms: Tensor, q_index: Tensor) -> tuple[Tensor, Tensor]:
        """(c at the queries (B, H, Tq), c at the keys (B, H, Tk)): the running sums of the keys' log gates."""
        c_k = k_terms[..., 0].cumsum(-1)
        return c_k[..., q_index], c_k

    def terms_bias(
        self,
        q_terms: Tensor | None,
        k_terms: Tensor,
        q_index: Tensor,
        layer: int,
        q: Tensor,
        k: Tensor,
        shared: tuple[Tensor, ...] | None = None,
    ) -> Tensor:
        """-> c_i - c_j (B, H, Tq, Tk) (positive above the diagonal, where the causal mask hides the pairs)."""
        c_q, c_k = self.running_sums(k_terms, q_index)
        return c_q[..., :, None] - c_k[..., None, :]

    def terms_score_mod(self, q_terms: Tensor | None, k_terms: Tensor, q_index: Tensor, layer: int) -> ScoreMod:
        """`terms_bias` as a score_mod that reads the running sums (B, H, T) at each pair."""
        c_q, c_k = self.running_sums(k_terms, q_index)

        def add_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + (c_q[b, h, q_idx] - c_k[b, h, kv_idx]).to(score.dtype)

        return add_bias


@register("fox_per_row")
class PerRowForgetting(HiddenStateBias):
    """The per-row forget gates of x-transformers' `PerRowDataDependentAlibi` (see the module docstring).
    position_params: gate_dim (default 8)."""

    defaults = {"gate_dim": 8}
    flex_refusal: ClassVar[str] = "its bias sums gates that depend on the query over the keys up to it"

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        dim = params["gate_dim"]
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise cls.param_error(cls.name, "gate_dim", dim, "an integer >= 1 (the gates' query and key size)")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.gate_dim = int(self.params["gate_dim"])
        rows = 2 * sizes.n_heads * self.gate_dim  # (query or key, head, gate_dim), x-transformers' order
        self.gate_weight = nn.Parameter(torch.randn(n_layers, rows, sizes.d_model) * sizes.init_std)

    def token_terms(self, x: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """x (B, T, d_model) -> (u, v): the gates' queries and keys, each (B, H, T, gate_dim)."""
        dtype = wide(x)
        both = F.linear(x.to(dtype), self.gate_weight[layer].to(dtype))
        u, v = both.unflatten(-1, (2, self.n_heads, self.gate_dim)).permute(2, 0, 3, 1, 4)
        return u, v

    def terms_bias(
        self,
        q_terms: Tensor | None,
        k_terms: Tensor,
        q_index: Tensor,
        layer: int,
        q: Tensor,
        k: Tensor,
        shared: tuple[Tensor, ...] | None = None,
    ) -> Tensor:
        """-> sum over the keys t in [j, i) of log sigmoid(u_i . v_t / sqrt(gate_dim)): (B, H, Tq, Tk)."""
        gates = F.logsigmoid(torch.matmul(q_terms, k_terms.transpose(-1, -2)) / math.sqrt(self.gate_dim))
        before = torch.arange(k_terms.shape[-2], device=k_terms.device) < q_index[:, None]  # (Tq, Tk): t < i
        gates = gates * before
        return gates.flip(-1).cumsum(-1).flip(-1)

    def terms_score_mod(self, q_terms: Tensor | None, k_terms: Tensor, q_index: Tensor, layer: int) -> None:
        return None
