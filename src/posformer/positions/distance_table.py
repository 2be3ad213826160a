"""An encoding's bias as FlexAttention reads it: a `score_mod`, by default a (heads, distances) table looked up.

An encoding whose bias depends on the distance key_pos - query_pos alone overrides `distance_bias`; `score_mod`
then builds its table over the distances a forward spans, once per forward and layer, and FlexAttention
(`Config.attn_impl="flex"`) adds it inside its kernel, never as a (B, H, T, S) tensor. An encoding whose bias is
not a table of the distance overrides `score_mod` itself (relative_key, DeBERTa, FIRE), reading tensors of O(T)
per head at most. The numbers a score_mod reads are tensors, never Python ints: `torch.compile` would compile the
kernel once per value of an int.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.ops.flex import ScoreMod
from posformer.positions.per_forward import batch_rows


class DistanceTable:
    """`distance_bias` (the hook) and `score_mod` (the bias in FlexAttention's form), which `PositionEncoding`
    takes; uses `per_forward` (`PerForward`)."""

    def distance_bias(self, rel: Tensor, layer: int = 0) -> Tensor | None:
        """rel: (R,) relative distances key_pos - query_pos -> the bias (H, R) the encoding adds at them,
        for encodings whose bias depends on distance alone; None for the others."""
        return None

    def score_mod(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> ScoreMod | None:
        """This encoding's bias as a FlexAttention `score_mod` (score, b, h, q_idx, kv_idx) -> score + bias, equal to
        `bias(q, k, q_pos, k_pos, layer)` at every pair it does not mask; None when it adds none.

        q: (B, H, Tq, dh), k: (B, Hkv, Tk, dh), q_pos: (B or 1, Tq), k_pos: (B or 1, Tk). This default reads
        `distance_bias` over the distances these positions span, (H, R), built once per forward and layer."""
        if type(self).distance_bias is DistanceTable.distance_bias:
            return None
        low, table = self.per_forward(
            ("score_table", layer), q_pos, k_pos, lambda q_rows, k_rows: self._score_table(q_rows, k_rows, layer)
        )
        batch = q.shape[0]
        k_rows = batch_rows(k_pos).expand(batch, -1)
        q_rows = (batch_rows(q_pos) + low).expand(batch, -1)  # so that key - query - low is a row of the table

        def add_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + table[h, k_rows[b, kv_idx] - q_rows[b, q_idx]].to(score.dtype)

        return add_bias

    def _score_table(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[int, Tensor]:
        """(low, table): the distances key - query from low to the largest that occurs, and their bias (H, R)."""
        low = int(k_pos.min()) - int(q_pos.max())
        high = int(k_pos.max()) - int(q_pos.min())
        table = self.distance_bias(torch.arange(low, high + 1, device=q_pos.device), layer)
        # contiguous: training T5 (whose table is a transposed view) through FlexAttention on an H100 took 23x
        # the time of no encoding with the view, 1.3x with a contiguous copy
        return low, table.contiguous()
