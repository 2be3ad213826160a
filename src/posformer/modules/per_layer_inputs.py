"""Per-layer inputs (`Config.per_layer_inputs`, Gemma 4's per-layer embeddings): each layer of a decoder gets P
features of each token of its own, and mixes them into the residual stream after its feed-forward.

`PerLayerInputs` (the model's) makes them once per forward, for every layer, from the token ids and the token
embeddings; `PerLayerInputGate` (each block's) mixes its layer's in. Shapes: B batch, T tokens, L layers, P the
per-layer width, d d_model.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from posformer.config import Config
from posformer.modules.feedforward import ACTIVATION_FNS, GATE_FNS, GATED
from posformer.modules.norms import make_norm
from posformer.ops.linear import Linear
from posformer.utils.tensor_checks import check_in_range


class PerLayerInputs(nn.Module):
    """(ids (B, T), token embeddings x (B, T, d)) -> per-layer inputs (B, T, L, P):

        (norm(project(x) / sqrt(d)) + embed(ids) * sqrt(P)) / sqrt(2)

    `embed` a table of `per_layer_inputs["vocab_size"]` tokens by L * P features, `projection` a linear map from
    d to L * P features (no bias), `norm` the config's norm over each layer's P features. x is what the first
    layer reads: the token embeddings after any `Config.scale_embeddings`.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.n_layers, self.dim = cfg.decoder_layers, cfg.per_layer_inputs["dim"]
        self.vocab_size = cfg.per_layer_inputs["vocab_size"]
        self.checks_ids = self.vocab_size < cfg.vocab_size  # ids of the vocabulary past the table are refused
        self.embed = nn.Embedding(self.vocab_size, self.n_layers * self.dim)
        self.projection = Linear(cfg.d_model, self.n_layers * self.dim, bias=False)
        self.norm = make_norm(cfg, self.dim)
        self.table_scale, self.projection_scale = math.sqrt(self.dim), cfg.d_model**-0.5

    def forward(self, ids: Tensor, x: Tensor) -> Tensor:
        if self.checks_ids:
            check_in_range(
                ids, 0, self.vocab_size, f"input_ids must lie in [0, {self.vocab_size}), the per-layer table"
            )
        layers = (*ids.shape, self.n_layers, self.dim)
        table = (self.embed(ids) * self.table_scale).reshape(layers)
        projected = self.norm((self.projection(x) * self.projection_scale).reshape(layers))
        return (projected + table) * 2**-0.5


class PerLayerInputGate(nn.Module):
    """One layer's mix of its per-layer input into the residual stream:

        x + norm(projection(act(gate(x)) * inputs))      x: (B, T, d), inputs: (B, T, P) -> (B, T, d)

    `gate` d -> P and `projection` P -> d (no biases), `norm` the config's norm over d, `act` the feed-forward's
    activation (its gate's, for a gated unit: GELU for GeGLU).
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        dim = cfg.per_layer_inputs["dim"]
        self.gate = Linear(cfg.d_model, dim, bias=False)
        self.projection = Linear(dim, cfg.d_model, bias=False)
        self.norm = make_norm(cfg)
        self.act = GATE_FNS[GATED[cfg.activation]] if cfg.activation in GATED else ACTIVATION_FNS[cfg.activation]

    def forward(self, x: Tensor, inputs: Tensor) -> Tensor:
        return x + self.norm(self.projection(self.act(self.gate(x)) * inputs))
