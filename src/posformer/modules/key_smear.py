"""Smeared keys (Olsson et al. 2022, "In-context Learning and Induction Heads", the "smeared key" model).

Each key head mixes the key made from its own token with the key made from the token before it:

    k'_j = sigmoid(a_h) * k_j + (1 - sigmoid(a_h)) * k_{j-1}        (k_{-1} = 0, and 0 after padding)

with one learned logit a_h per key head (0 at initialisation: an even mix). A query can then match the token
*before* a key within one layer, which an induction head ("find where my token occurred, copy what followed")
otherwise needs a previous-token head in an earlier layer for. Olsson et al. report that induction heads then
form in one-layer models and sooner in deeper ones; docs/longeval.md measures how much sooner a small model
learns to retrieve a passkey by content. The mix is taken before the position encoding, so the mixed key is
rotated (or biased) at its own position j like any key, and every encoding and extension method applies
unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class KeySmear(nn.Module):
    """The learned mix of each key with its predecessor's, per key head. `mix`: (Hkv,) logits."""

    def __init__(self, kv_heads: int) -> None:
        super().__init__()
        self.mix = nn.Parameter(torch.zeros(kv_heads))

    def forward(self, k: Tensor, previous: Tensor | None, predecessor_real: Tensor | None) -> Tensor:
        """The smeared keys (B, Hkv, T, dh).

        k: (B, Hkv, T, dh) the keys of this call's tokens, before the position encoding. previous: (B, Hkv, 1, dh)
        the key of the token before the first of them (a cache's last), or None when there is none.
        predecessor_real: (B, T) bool, False where a token's predecessor is padding (its key then counts as 0),
        or None when every predecessor is a real token.
        """
        before = F.pad(k[:, :, :-1], (0, 0, 1, 0)) if previous is None else torch.cat((previous, k[:, :, :-1]), 2)
        if predecessor_real is not None:
            before = before * predecessor_real[:, None, :, None].to(before.dtype)
        own = torch.sigmoid(self.mix.float()).to(k.dtype)[:, None, None]  # (Hkv, 1, 1)
        return own * k + (1 - own) * before

    def extra_repr(self) -> str:
        return f"kv_heads={self.mix.numel()}"


def predecessor_real(key_keep: Tensor | None, new: int, documents: Tensor | None = None) -> Tensor | None:
    """For the last `new` of the keys that key_keep (B, S) marks real (True) or padding: (B, new) bool, whether
    each one's predecessor is real and, with packed `documents` (B, S), in the same document; None when there is
    neither padding nor documents. The first key of all has no predecessor: `KeySmear` takes it as 0 whatever
    this says."""
    if key_keep is None and documents is None:
        return None
    real = torch.ones_like(documents, dtype=torch.bool) if key_keep is None else key_keep
    real = F.pad(real, (1, 0), value=True)[:, -new - 1 : -1]
    if documents is not None:
        real = real & ~F.pad(documents[:, 1:] != documents[:, :-1], (1, 0), value=False)[:, -new:]
    return real
