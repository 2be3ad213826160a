"""The position-wise feed-forward network and its activations."""

from __future__ import annotations

from typing import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from posformer.config import Config
from posformer.ops.linear import Linear, linear

ACTIVATION_FNS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "swish": F.silu,
    "silu": F.silu,
}

# Gated linear units (Shazeer 2020): act(x W) * (x V). The activation of the gate
# ("geglu_tanh": the tanh approximation of GELU, T5 v1.1's "gated-gelu"):
GATED = {"glu": "sigmoid", "swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh", "reglu": "relu"}
GATE_FNS: dict[str, Callable[[Tensor], Tensor]] = {
    "sigmoid": F.sigmoid,
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": ACTIVATION_FNS["gelu_tanh"],
    "relu": F.relu,
}


class FeedForward(nn.Module):
    """down(act(up(x))), or for gated units down(gate_act(x W) * (x V)) with W and V stored fused in `up`.

    x: (B, T, d_model) -> (B, T, d_model). For gated units `up.weight` is
    [W; V]: rows [0, d_ff) are the gate, rows [d_ff, 2 d_ff) the value. They are
    applied as two products on views of `up.weight`, so that the gate and the value
    come out contiguous and their gradients need no concatenation (docs/speed.md).
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.gated = cfg.activation in GATED
        self.act = GATE_FNS[GATED[cfg.activation]] if self.gated else ACTIVATION_FNS[cfg.activation]
        self.d_ff = cfg.ff_dim
        self.up = Linear(cfg.d_model, self.d_ff * (2 if self.gated else 1), bias=cfg.ffn_bias)
        self.down = Linear(self.d_ff, cfg.d_model, bias=cfg.ffn_bias)
        self.dropout = nn.Dropout(cfg.activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        if not self.gated:
            return self.down(self.dropout(self.act(self.up(x))))
        gate_w, value_w = self.up.weight.split(self.d_ff)
        gate_b, value_b = (None, None) if self.up.bias is None else self.up.bias.split(self.d_ff)
        h = self.act(linear(x, gate_w, gate_b)) * linear(x, value_w, value_b)
        return self.down(self.dropout(h))
