"""KV sharing (`Config.kv_sources`): self-attention layers that attend over the keys and values an earlier layer
of the same stack made in the same forward (Gemma 4's KV-shared layers; `posformer.config.kv_sharing`).

The stack owns one `SharedKV` and hands each attention layer that takes part its `KVShare` when it builds it: a
source lends what it attends over (after its KV cache took them: the cached keys too), a reader reads them.
Shapes: B batch, Hkv key/value heads, S keys, dh head dim.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from torch import Tensor

# what a source lends: its keys and values (B, Hkv, S, dh) and their positions (B, S)
Lent = tuple[Tensor, Tensor, Tensor]


class SharedKV:
    """The keys and values the source layers of one stack lend, held for one forward of the stack.

    The stack opens `forward_scope` around its layers; a checkpointed layer recomputed in the backward pass runs
    with `memo_restored(memo_snapshot())` as taken before it first ran, and so reads what it read then.
    """

    def __init__(self) -> None:
        self._held: dict[int, Lent] | None = None

    @contextmanager
    def forward_scope(self) -> Iterator[None]:
        """One forward of the stack: what the sources lend inside it is dropped when it ends."""
        outer, self._held = self._held, {}
        try:
            yield
        finally:
            self._held = outer

    def memo_snapshot(self) -> dict[int, Lent] | None:
        """What the sources have lent so far in this forward (a copy; None outside `forward_scope`)."""
        return None if self._held is None else dict(self._held)

    @contextmanager
    def memo_restored(self, snapshot: dict[int, Lent] | None) -> Iterator[None]:
        """Run with a copy of `snapshot` as what was lent (a checkpointed layer, run first inside the forward's
        scope, then recomputed after it). What the layer lends joins the forward's, while its scope is open."""
        outer, self._held = self._held, None if snapshot is None else dict(snapshot)
        try:
            yield
        finally:
            lent, self._held = self._held, outer
            if outer is not None and lent is not None:
                outer.update(lent)

    def lend(self, layer: int, k: Tensor, v: Tensor, k_pos: Tensor) -> None:
        """Layer `layer`'s keys and values k, v (B, Hkv, S, dh) at positions k_pos (B, S), for the later layers."""
        if self._held is not None:
            self._held[layer] = (k, v, k_pos)

    def read(self, layer: int) -> Lent:
        """What layer `layer` lent in this forward: (k, v, k_pos)."""
        if self._held is None or layer not in self._held:
            raise RuntimeError(
                f"KV sharing: layer {layer}'s keys and values were read before it lent them in this forward "
                "(a layer that reads another's runs inside its stack's forward, after it)"
            )
        return self._held[layer]


@dataclass(frozen=True)
class KVShare:
    """One attention layer's part in KV sharing: `layer` its index in the stack, `source` the layer whose keys and
    values it reads (None: it makes its own), `lends` whether later layers read its own."""

    store: SharedKV
    layer: int
    source: int | None
    lends: bool

    @property
    def reads(self) -> bool:
        return self.source is not None


def kv_shares(kv_sources: list[int | None] | None, n_layers: int, store: SharedKV) -> list[KVShare | None]:
    """Each layer's `KVShare` under `Config.kv_sources` (None for a layer that neither lends nor reads)."""
    if kv_sources is None:
        return [None] * n_layers
    lenders = {j for j in kv_sources if j is not None}
    return [
        KVShare(store, i, j, i in lenders) if j is not None or i in lenders else None for i, j in enumerate(kv_sources)
    ]
