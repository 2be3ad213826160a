"""Values that every layer of a stack shares, computed once per forward of the stack.

The stack opens `forward_scope` around its layers; inside it, `per_forward` computes a value (a table of positions,
a bias) once for all of them. A tensor computed from positions that repeat one row over the batch is computed
from that row alone (`batch_rows`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
from torch import Tensor

Result = TypeVar("Result")


def batch_rows(pos: Tensor) -> Tensor:
    """pos: (B, T) -> (1, T) when every row is one row repeated by construction (stride 0 over the batch,
    as the default position ids), else pos itself. What is computed from that row broadcasts over the
    batch; telling this costs no host synchronisation."""
    return pos[:1] if pos.dim() == 2 and pos.shape[0] > 1 and pos.stride(0) == 0 else pos


class PerForward:
    """`forward_scope` and `per_forward`, the memo of one forward that `PositionEncoding` takes."""

    _per_forward: dict[Hashable, tuple[Any, Any, Any]] | None = None

    @contextmanager
    def forward_scope(self) -> Iterator[None]:
        """One forward of the stack: inside it, `per_forward` computes each value once for all layers."""
        outer, self._per_forward = self._per_forward, {}
        try:
            yield
        finally:
            self._per_forward = outer

    def memo_snapshot(self) -> dict[Hashable, tuple[Any, Any, Any]] | None:
        """What this forward has computed so far (a copy; None outside `forward_scope`)."""
        return None if self._per_forward is None else dict(self._per_forward)

    @contextmanager
    def memo_restored(self, snapshot: dict[Hashable, tuple[Any, Any, Any]] | None) -> Iterator[None]:
        """Run with a copy of `snapshot` as the memo: a checkpointed layer recomputed in the backward pass then
        finds what it found in the forward (and so runs the same operations), after the scope has closed."""
        outer, self._per_forward = self._per_forward, None if snapshot is None else dict(snapshot)
        try:
            yield
        finally:
            self._per_forward = outer

    def per_forward(
        self, key: Hashable, q_pos: Tensor, k_pos: Tensor, compute: Callable[[Tensor, Tensor], Result]
    ) -> Result:
        """compute(q_pos, k_pos), once per stack forward for each `key` (say, a table shared by the layers).

        Inside `forward_scope`, a later call with the same key and the same position tensors (the stack
        hands the same ones to every layer; recognised by identity) returns the first result; outside it,
        every call computes. Positions that repeat one row over the batch reach `compute` as that row,
        (1, T), so that a table of positions is computed once, not once per row.
        """
        memo = self._per_forward
        if memo is not None:
            hit = memo.get(key)
            if hit is not None and hit[0] is q_pos and hit[1] is k_pos:
                return hit[2]
        q_rows = batch_rows(q_pos)
        value = compute(q_rows, q_rows if k_pos is q_pos else batch_rows(k_pos))
        if memo is not None:
            memo[key] = (q_pos, k_pos, value)
        return value

    def per_forward_range(self, key: Hashable, low: int, high: int, compute: Callable[[int, int], Tensor]) -> Tensor:
        """compute(low, high): values (..., high - low + 1, n) of the integers low..high (say, distances), read
        from a wider range this forward computed for `key` when one covers them.

        Made for the blocks of a long forward (`modules.bias_blocks`), where each block asks for a range a little
        past the last: a range that is not covered is computed twice as wide in the direction it grows, so that a
        forward computes O(log T) ranges. Only the last key's range is kept (the layers run one after another),
        and only without gradients: under them each block computes its own (a checkpointed block recomputes
        what it used).
        """
        memo = self._per_forward
        if memo is None or torch.is_grad_enabled():
            return compute(low, high)
        first, last = low, high
        hit = memo.get("range")
        if hit is not None and hit[0] == key:
            first, values = hit[1], hit[2]
            last = first + values.shape[-2] - 1
            if first <= low and high <= last:
                return values[..., low - first : high - first + 1, :]
            span = last - first + 1
            first = min(low, first - span) if low < first else first
            last = max(high, last + span) if high > last else last
        values = compute(first, last)
        memo["range"] = (key, first, values)
        return values[..., low - first : high - first + 1, :]
