"""Random values for the tensors Hugging Face initialises to constants (norm weights 1, biases 0).

With those constants a mapping that swaps two norms or drops a bias still gives the
same logits; after `perturb_constants` every such mistake shows in the comparison.
"""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def perturb_constants(model: nn.Module, std: float = 0.2, seed: int = 1) -> nn.Module:
    """Every LayerNorm weight ~ N(1, std) and bias ~ N(0, std), every linear / Conv1D bias ~ N(0, std)."""
    g = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        owner = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        if leaf == "bias":
            param.copy_(torch.randn(param.shape, generator=g) * std)
        elif leaf == "weight" and isinstance(owner, nn.LayerNorm):
            param.copy_(1 + torch.randn(param.shape, generator=g) * std)
    return model
