"""The mixture-of-experts feed-forward (`Config.n_experts`): a top-k router and `n_experts` feed-forward networks.

Each token goes to the k experts (`Config.experts_per_token`) its router scores highest, and its output is
the weighted sum of theirs: y = sum over its experts e of w_e * expert_e(x). The routing weights are Mixtral's:
a softmax over every expert's logit, the top k, renormalised to sum to one (`Config.norm_topk_prob`; Qwen3-MoE
can leave them unnormalised). The experts are posformer's feed-forward networks (`Config.activation`, gated or
not, `Config.ffn_bias`), their weights stored as batched tensors (n_experts, ...).

How the experts run. The k * N routed (token, expert) slots are sorted by expert once; the tokens are copied
into that order ((k N, d_model) rows), each expert multiplies its own contiguous block of rows (two or three
matrix products on the rows routed to it, none on the others), and the results go back to their slots and are
summed per token with the routing weights. This is a loop over the experts that got tokens, but each step is a
plain dense product on contiguous rows, which the CPU's BLAS runs at full speed, with one gather of the rows
into expert order and one back in all (`_RowsInOrder`, `ops.packing.take_rows`: their gradients are gathers
and copies too, not accumulating scatters) instead of a gather and a scatter-add per expert (transformers'
Mixtral block), and no padding of the experts to one capacity (a grouped bmm over (n_experts, capacity,
d_model) multiplies padding rows when the routing is uneven, and a capacity below the largest load drops
tokens). The rows per expert are read back to the host once per call (one device sync on a GPU, as
transformers' loop has). The expert weights are split with `unbind` once per call, so that their gradient is
assembled with one stack instead of one full-size tensor per expert.

GPT-OSS's variant is a set of options (`MoEFeedForward` reads them from `Config`): a router bias
(`Config.router_bias`), the softmax over the top-k logits only (`Config.router_softmax="top_k"`), expert
biases (`Config.ffn_bias`), and its clamped SwiGLU (`Config.expert_activation="swiglu_clamped"`,
`clamped_swiglu`) as a `GatedUnit` (the gate and value halves of each expert's first product -> its units).
Llama 4's is two more: the sigmoid of each top-k logit scales its expert's input, y = sum over its experts e of
expert_e(sigmoid(l_e) * x) (`Config.router_softmax="sigmoid_input"`), and a shared expert, a feed-forward every
token goes through, whose output is added (`Config.shared_expert_d_ff`). Qwen3-Next's adds a scalar gate per token
to it, sigmoid(x w) times its output (`Config.shared_expert_gate`).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer.config import Config
from posformer.modules.feedforward import ACTIVATION_FNS, GATE_FNS, GATED, FeedForward
from posformer.modules.sigmoid_router import SigmoidRouter
from posformer.ops.linear import Linear, linear
from posformer.ops.packing import take_rows

GatedUnit = Callable[[Tensor, Tensor], Tensor]
"""(gate, value), each (M, d_ff) -> the hidden units (M, d_ff): act(gate) * value for Config's gated units."""

SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0


def clamped_swiglu(gate: Tensor, value: Tensor) -> Tensor:
    """GPT-OSS's expert unit (`Config.expert_activation="swiglu_clamped"`): the gate clamped above at 7 and the
    value to [-7, 7], then (value + 1) * gate * sigmoid(1.702 gate), as transformers 4.57.6's `GptOssExperts`
    (alpha 1.702, limit 7.0: its checkpoints' `swiglu_limit`)."""
    gate = gate.clamp(max=SWIGLU_LIMIT)
    value = value.clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
    return (value + 1) * (gate * torch.sigmoid(gate * SWIGLU_ALPHA))


EXPERT_UNITS: dict[str, GatedUnit] = {"swiglu_clamped": clamped_swiglu}


def route(logits: Tensor, top_k: int, renormalise: bool = True, softmax_over: str = "all") -> tuple[Tensor, Tensor]:
    """logits (N, n_experts) -> (weights (N, top_k) in the logits' dtype, experts (N, top_k) int64), best first.

    softmax_over "all": softmax over every expert in float32 (or wider), its top k, divided by their sum when
    `renormalise` (Mixtral; Qwen3-MoE's `norm_topk_prob`). "top_k": the top k logits, a softmax over them alone
    (GPT-OSS; their sum is one already). "sigmoid_input": the sigmoid of each of the top k logits, in float32 (or
    wider), unnormalised (Llama 4, which scales each expert's input by it).
    """
    if softmax_over == "sigmoid_input":
        top, experts = torch.topk(logits, top_k, dim=-1)
        return torch.sigmoid(top.to(torch.promote_types(top.dtype, torch.float32))).to(logits.dtype), experts
    if softmax_over == "top_k":
        top, experts = torch.topk(logits, top_k, dim=-1)
        return torch.softmax(top, dim=-1), experts
    probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    weights, experts = torch.topk(probs, top_k, dim=-1)
    if renormalise:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype), experts


class Experts(nn.Module):
    """`n_experts` feed-forward networks, run on the rows routed to each.

    up: (n_experts, d_ff, d_model), or (n_experts, 2 d_ff, d_model) for gated units with the gate in rows
    [0, d_ff) and the value in [d_ff, 2 d_ff), as `FeedForward.up`; down: (n_experts, d_model, d_ff); with
    `Config.ffn_bias` up_bias (n_experts, up rows) and down_bias (n_experts, d_model). d_ff is
    `Config.expert_ff_dim`. `Config.expert_activation` names a `GatedUnit` (`EXPERT_UNITS`) that replaces the
    gated activation and makes the experts gated whatever `activation`.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        unit = None if cfg.expert_activation is None else EXPERT_UNITS[cfg.expert_activation]
        self.gated = cfg.activation in GATED or unit is not None
        self.act = GATE_FNS[GATED[cfg.activation]] if cfg.activation in GATED else ACTIVATION_FNS[cfg.activation]
        self.unit = unit
        self.n_experts, self.d_ff = cfg.n_experts, cfg.expert_ff_dim
        rows = self.d_ff * (2 if self.gated else 1)
        self.up = nn.Parameter(torch.empty(self.n_experts, rows, cfg.d_model))
        self.down = nn.Parameter(torch.empty(self.n_experts, cfg.d_model, self.d_ff))
        self.up_bias = nn.Parameter(torch.empty(self.n_experts, rows)) if cfg.ffn_bias else None
        self.down_bias = nn.Parameter(torch.empty(self.n_experts, cfg.d_model)) if cfg.ffn_bias else None
        self.dropout = nn.Dropout(cfg.activation_dropout)
        self.reset_parameters(cfg.init_std)

    @torch.no_grad()
    def reset_parameters(self, std: float) -> None:
        """Weights N(0, std), biases zero (`Config.init` "normal", as for every linear layer)."""
        self.up.normal_(0.0, std)
        self.down.normal_(0.0, std)
        for bias in (self.up_bias, self.down_bias):
            if bias is not None:
                bias.zero_()

    def params_per_expert(self) -> int:
        """The weights one expert multiplies a token by (biases left out)."""
        return self.up[0].numel() + self.down[0].numel()

    def forward(self, x: Tensor, counts: list[int]) -> Tensor:
        """x: (M, d_model), the rows of expert 0, then those of expert 1, ...; counts: the rows of each expert
        (n_experts ints summing to M) -> (M, d_model), each row through its expert."""
        ups, downs = self.up.unbind(0), self.down.unbind(0)
        up_biases = [None] * self.n_experts if self.up_bias is None else self.up_bias.unbind(0)
        down_biases = [None] * self.n_experts if self.down_bias is None else self.down_bias.unbind(0)
        out = []
        for e, rows in enumerate(x.split(counts)):
            if rows.shape[0] == 0:
                continue
            if self.gated:
                gate_w, value_w = ups[e].split(self.d_ff)
                gate_b, value_b = (None, None) if up_biases[e] is None else up_biases[e].split(self.d_ff)
                gate, value = linear(rows, gate_w, gate_b), linear(rows, value_w, value_b)
                h = self.act(gate) * value if self.unit is None else self.unit(gate, value)
            else:
                h = self.act(linear(rows, ups[e], up_biases[e]))
            out.append(linear(self.dropout(h), downs[e], down_biases[e]))
        return torch.cat(out) if out else x.new_zeros(0, x.shape[1])


class MoEFeedForward(nn.Module):
    """The mixture-of-experts feed-forward: x (..., d_model) -> (..., d_model), for (B, T, d_model) or a
    packing's (N, d_model) alike (every token on its own).

    router: Linear d_model -> n_experts (its weight (n_experts, d_model); a bias with `router_bias`);
    experts: `Experts`. `forward` appends the router's logits (N, n_experts) to `router_logits` when given: the
    model's load-balancing loss (`load_balancing_loss`) reads them, whatever softmax routes the tokens (GPT-OSS's
    too, as transformers 5 records them; 4.57.6's GPT-OSS recorded its sparse routing scores instead, whose
    softmax, a second one, is nearly uniform). The router has a bias with `Config.router_bias`; its softmax runs
    over `Config.router_softmax`, or DeepSeek-V3's sigmoid routing replaces it (`sigmoid_router`, a
    `SigmoidRouter` reading `router`'s weights, with `Config.sigmoid_router`). "sigmoid_input" weights the
    experts' inputs instead of their outputs. shared_expert: a `FeedForward` of `Config.shared_expert_d_ff` hidden
    units whose output is added for every token (None without); shared_expert_gate: Linear d_model -> 1, the
    shared expert's output times its sigmoid (`Config.shared_expert_gate`; None without).
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.top_k, self.renormalise = cfg.experts_per_token, cfg.norm_topk_prob
        self.softmax_over = cfg.router_softmax
        self.scales_input = cfg.router_softmax == "sigmoid_input"
        self.router = Linear(cfg.d_model, cfg.n_experts, bias=cfg.router_bias)
        self.sigmoid_router = None if cfg.sigmoid_router is None else SigmoidRouter(cfg)  # DeepSeek-V3's routing
        self.experts = Experts(cfg)
        shared = cfg.shared_expert_d_ff
        self.shared_expert = None if shared is None else FeedForward(cfg.replace(d_ff=shared))
        self.shared_expert_gate = Linear(cfg.d_model, 1, bias=False) if cfg.shared_expert_gate else None

    def matmul_params_per_token(self) -> int:
        """The weights a token is multiplied by: the router's and those of its `top_k` experts (a shared expert's
        are linear layers, which `summary.matmul_params_per_token` counts with the dense ones)."""
        return self.router.weight.numel() + self.top_k * self.experts.params_per_expert()

    def forward(self, x: Tensor, router_logits: list[Tensor] | None = None) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])  # (N, d_model)
        if self.sigmoid_router is None:
            logits = self.router(flat)  # (N, n_experts)
            weights, chosen = route(logits, self.top_k, self.renormalise, self.softmax_over)  # (N, k) each
        else:
            logits, weights, chosen = self.sigmoid_router(flat, self.router)
        if router_logits is not None:
            router_logits.append(logits)
        slots = chosen.flatten()  # (N k,): token t's j-th expert at slot t * k + j
        order = slots.argsort(stable=True)  # (N k,): the slots grouped by expert
        inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
        counts = torch.bincount(slots, minlength=self.experts.n_experts).tolist()
        rows = _RowsInOrder.apply(flat, order, inverse, self.top_k)  # (N k, d_model), by expert
        if self.scales_input:  # Llama 4: each row times its routing weight before its expert
            rows = rows * weights.flatten()[order].to(rows.dtype).unsqueeze(-1)
        y = self.experts(rows, counts)  # (N k, d_model), by expert
        y = take_rows(y, inverse).view(*weights.shape, flat.shape[1])  # (N, k, d_model), in slot order
        y = y.sum(1) if self.scales_input else (y * weights.to(y.dtype).unsqueeze(-1)).sum(1)
        if self.shared_expert is not None:
            shared = self.shared_expert(flat)  # (N, d_model)
            if self.shared_expert_gate is not None:  # Qwen3-Next: times sigmoid(x w), one scalar per token
                shared = torch.sigmoid(self.shared_expert_gate(flat)) * shared
            y = y + shared
        return y.view(x.shape)


class _RowsInOrder(torch.autograd.Function):
    """x (N, d) -> (N k, d): at row i, the token of slot order[i] (row order[i] // k of x), `order` a permutation
    of the N k slots and `inverse` its inverse. The gradient of a token sums its k rows, gathered back with
    `inverse`: one copy, where autograd's backward of `index_select` would scatter-add."""

    @staticmethod
    def forward(ctx, x: Tensor, order: Tensor, inverse: Tensor, k: int) -> Tensor:
        ctx.save_for_backward(inverse)
        ctx.k = k
        return x.index_select(0, order // k)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (inverse,) = ctx.saved_tensors
        return grad.index_select(0, inverse).view(-1, ctx.k, grad.shape[1]).sum(1), None, None, None


def load_balancing_loss(router_logits: list[Tensor], top_k: int, keep: list[Tensor | None]) -> Tensor:
    """The Switch Transformer's auxiliary load-balancing loss (Fedus et al. 2022, eqs. 4-6), as transformers'
    `load_balancing_loss_func` computes it for Mixtral, Qwen3-MoE and (transformers 5) GPT-OSS: over the rows of
    every layer's router logits together (real tokens only),

        n_experts * sum over experts e and ranks j of f_je * P_e,

    f_je the share of the rows whose j-th choice (the top k of the softmax) is e, P_e the mean softmax
    probability of e. It is top_k when the routing is uniform and grows as it concentrates on few experts.
    router_logits: each (N_i, n_experts); keep: for each, None (every row a real token) or (N_i,) or any shape
    of N_i entries, nonzero for a real token. Computed in float32 (or wider); zero when no row is real.
    """
    rows = [r if k is None else r[k.reshape(-1).bool()] for r, k in zip(router_logits, keep, strict=True)]
    logits = torch.cat(rows)  # (M, n_experts)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if logits.shape[0] == 0:
        return logits.new_zeros(())
    n_experts = logits.shape[1]
    probs = torch.softmax(logits, dim=-1)
    chosen = torch.topk(probs, top_k, dim=-1).indices  # (M, k)
    share = F.one_hot(chosen, n_experts).to(probs.dtype).mean(0)  # (k, n_experts)
    return n_experts * (share * probs.mean(0)).sum()
