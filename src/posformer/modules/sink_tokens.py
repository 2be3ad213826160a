"""Learned sink tokens (`Config.sink_tokens`): n embeddings that lead every sequence of a decoder.

StreamingLLM (Xiao et al. 2024, section 3.3) pre-trains with one learnable token at the start of every sample, so
that the model dumps its surplus attention there rather than on whatever text happens to come first; x-transformers
calls the same thing memory tokens. The sinks take positions 0..n-1 and the input's tokens n onwards, so a relative
encoding sees the sinks n..1 slots before the first token, as if they had been typed there. They enter the KV cache
with the first call, and later calls add the new tokens only.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SinkTokens(nn.Module):
    """weight: (n, d_model), drawn N(0, std) as the token embeddings are (`reset_parameters`)."""

    def __init__(self, count: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(count, d_model))

    def reset_parameters(self, std: float) -> None:
        nn.init.normal_(self.weight, std=std)

    @property
    def count(self) -> int:
        return self.weight.shape[0]

    def lead(
        self, x: Tensor, pos: Tensor, keep: Tensor | None, first_call: bool
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The decoder's input with the sinks in front.

        x: (B, T, d_model) the embedded tokens; pos: (B, T) their positions counted from the first input token;
        keep: (B, past + T) bool over the cached and new tokens, or None. Returns x (B, n + T, d_model) when
        `first_call` (the sinks are not cached yet), else x unchanged; pos shifted by n, with the sinks' 0..n-1 in
        front on the first call; keep with n True columns in front (the sinks are cached or in front of x).
        """
        batch, n = x.shape[0], self.count
        pos = pos + n
        if keep is not None:
            keep = torch.cat((keep.new_ones(batch, n), keep), dim=1)
        if first_call:
            sinks = self.weight.to(x.dtype).expand(batch, n, -1)
            x = torch.cat((sinks, x), dim=1)
            pos = torch.cat((torch.arange(n, device=pos.device).expand(batch, n), pos), dim=1)
        return x, pos, keep
