"""Model FLOPs per token of a decoder, the numerator of model FLOPs utilisation (MFU).

The count of PaLM (Chowdhery et al. 2022, appendix B): a training step costs 6N + 12·L·H·dh·T FLOPs per token,
where N counts the parameters that take part in matrix products (the weight matrices, the output
projection among them, but not the input embedding lookup unless it is tied to the output projection;
norm scales and biases are not matrix products), L the layers, H·dh the attention width and T the
sequence length; the attention term counts the whole T x T score matrix, as PaLM does, even under a causal
mask. A forward alone is a third of it. Recomputation and the optimizer are not counted: MFU measures the
model's work, not the implementation's.
"""

from __future__ import annotations

from torch import nn

from posformer.config import Config


def matmul_params(cfg: Config, model: nn.Module) -> int:
    """N of a decoder `model` built from `cfg` without position tables: its weight matrices (2-D
    parameters) less the input token embedding, a lookup, unless it is tied to the output projection."""
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    return matrices if cfg.tie_embeddings else matrices - cfg.vocab_size * cfg.d_model


def train_flops_per_token(cfg: Config, model: nn.Module, length: int) -> float:
    """6N + 12·L·H·dh·T: the FLOPs of one token's forward and backward at sequence length `length`."""
    return 6.0 * matmul_params(cfg, model) + 12.0 * cfg.n_layers * cfg.n_heads * cfg.head_dim * length


def forward_flops_per_token(cfg: Config, model: nn.Module, length: int) -> float:
    """2N + 4·L·H·dh·T: the FLOPs of one token's forward."""
    return train_flops_per_token(cfg, model, length) / 3.0
