"""KV cache: the keys, values and key positions of earlier steps, per layer."""

from __future__ import annotations

import torch
from torch import Tensor


class LayerCache:
    """One attention layer's cache. k, v: (B, Hkv, S, dh); pos: (B, S)."""

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.pos: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: Tensor, v: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Add this step's k, v (B, Hkv, T, dh) at positions pos (B, T); return the whole cache."""
        if self.k is None:
            self.k, self.v, self.pos = k, v, pos
        else:
            self.k = torch.cat((self.k, k), dim=2)
            self.v = torch.cat((self.v, v), dim=2)
            self.pos = torch.cat((self.pos, pos), dim=1)
        return self.k, self.v, self.pos

    def set(self, k: Tensor, v: Tensor, pos: Tensor) -> None:
        """Store cross-attention keys and values once; they do not grow."""
        self.k, self.v, self.pos = k, v, pos

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search): index (B',)."""
        if self.k is not None:
            self.k, self.v, self.pos = self.k[index], self.v[index], self.pos[index]


class Cache:
    """The KV cache of a whole model: self-attention and (encoder-decoder) cross-attention per layer.

    Pass the same object to successive `Transformer.forward(..., cache=cache)` calls.
    For an encoder-decoder model it also keeps the encoder output and its mask.
    """

    def __init__(self, n_layers: int) -> None:
        self.self_attn = [LayerCache() for _ in range(n_layers)]
        self.cross_attn = [LayerCache() for _ in range(n_layers)]
        self.encoder_hidden: Tensor | None = None
        self.encoder_mask: Tensor | None = None

    def __len__(self) -> int:
        """How many positions the self-attention cache already holds."""
        return len(self.self_attn[0])

    def reorder(self, index: Tensor) -> None:
        for layer in self.self_attn + self.cross_attn:
            layer.reorder(index)
        if self.encoder_hidden is not None:
            self.encoder_hidden = self.encoder_hidden[index]
        if self.encoder_mask is not None:
            self.encoder_mask = self.encoder_mask[index]
