"""BERT's relative position embeddings: Hugging Face `position_embedding_type` "relative_key" and
"relative_key_query".

Shaw et al. 2018 without clipping, in the variants of Huang et al. 2020, "Improve
Transformer Models with Better Relative Position Embeddings" (methods 3 and 4),
as implemented by `transformers` `BertSelfAttention` (4.57.6). Each layer l has a
table E_l of 2 * max_positions - 1 vectors of size head_dim, one per distance
i - j in [-(max_positions - 1), max_positions - 1] (row i - j + max_positions - 1):

    relative_key:        logits_ij = scale * (q_i . k_j + q_i . E_l[i - j])
    relative_key_query:  logits_ij = scale * (q_i . k_j + q_i . E_l[i - j] + k_j . E_l[i - j])

Both position terms are added before BERT divides by sqrt(head_dim), hence the
factor `scale`. Note that the key term uses the same row i - j as the query term
(Hugging Face's `einsum("bhrd,lrd->bhlr", key, E)`). Positions must lie in
[0, max_positions): the table cannot extrapolate.

Through FlexAttention (`score_mod`) the queries (and keys) are scored against the rows of E_l that the pairs
use, (B, H, T, R) with R <= 2 * max_positions - 1, and each pair's score is read at its row (`pair_scores`).

Parameters: `distance[l].weight`, (2 * max_positions - 1, head_dim), is Hugging
Face's `encoder.layer.{l}.attention.self.distance_embedding.weight`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from posformer.ops.flex import ScoreMod
from posformer.positions.contract import PositionEncoding
from posformer.positions.pair_scores import distance_span, pair_score_mod
from posformer.positions.registry import register
from posformer.positions.relative_scores import (
    Diagonal,
    expand_heads,
    key_position_scores,
    pair_rows,
    query_position_scores,
    relative_distance,
)
from posformer.positions.sizes import Sizes
from posformer.utils.tensor_checks import check_values


@register("relative_key")
class RelativeKey(PositionEncoding):
    """bias_ij = scale * q_i . E_l[i - j]; one (2 * max_positions - 1, head_dim) table per layer."""

    adds_bias = True
    flex_form = "score_mod"

    key_term = False
    extrapolates = False
    compiles_whole = False  # the table rows scored: the span of distances that occur (`_distance_span`)

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.max_positions = sizes.max_positions
        self.distance = nn.ModuleList(
            nn.Embedding(2 * sizes.max_positions - 1, sizes.head_dim) for _ in range(n_layers)
        )

    def check_positions(self, pos: Tensor) -> None:
        super().check_positions(pos)
        check_values(
            (pos < self.max_positions).all(),
            f"position_ids reach beyond the relative distance table "
            f"of position={self.name!r}, which covers distances up to {self.max_positions - 1} "
            f"(Config.max_positions={self.max_positions}, so positions in [0, {self.max_positions})); "
            f"shorten the input or use an encoding that extrapolates such as 'shaw', 't5' or 'rope'",
            lambda: f"position {int(pos.max())}",
        )

    def table_and_index(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> tuple[Tensor, Tensor | Diagonal]:
        """The rows of E_l that these positions use, (R, head_dim), and the row of each pair, (B or 1, Tq, Tk)
        or a `Diagonal`.

        Only the distances in [min(i - j), max(i - j)] are scored, not the whole table.
        """
        low, high, index = self.per_forward("span", q_pos, k_pos, self._distance_span)
        offset = self.max_positions - 1
        return self.distance[layer].weight[low + offset : high + offset + 1], index

    def _distance_span(self, q_pos: Tensor, k_pos: Tensor) -> tuple[int, int, Tensor | Diagonal]:
        """The smallest and largest i - j, and i - j minus the smallest: (B or 1, Tq, Tk) or a `Diagonal`.

        In a causal stack a key after its query is masked, and its bias never used: i - j < 0 is read as
        0, so the table rows scored are the T distances attention can use, not 2T - 1.
        """
        low = int((q_pos.amin(-1) - k_pos.amax(-1)).min())  # per batch row, as the pairs are
        high = int((q_pos.amax(-1) - k_pos.amin(-1)).max())
        if self.causal:
            low, high = max(low, 0), max(high, 0)
        low, high = self._checked(low, high)

        def distances() -> Tensor:
            dist = relative_distance(q_pos, k_pos)
            return dist.clamp(min=0) if self.causal else dist

        return low, high, pair_rows(q_pos, k_pos, distances, low)

    def _checked(self, low: int, high: int) -> tuple[int, int]:
        """low, high: distances i - j; ValueError when they reach beyond the table."""
        if low < -(self.max_positions - 1) or high > self.max_positions - 1:
            raise ValueError(
                f"relative distances in [{low}, {high}] exceed the table of position={self.name!r} "
                f"(|i - j| <= {self.max_positions - 1}, Config.max_positions={self.max_positions})"
            )
        return low, high

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        table, index = self.table_and_index(q_pos, k_pos, layer)
        q_len, k_len = q.shape[-2], k.shape[-2]
        scores = query_position_scores(q * self.scale, table, index, k_len)  # the scale on (T, dh), not (T, T)
        if self.key_term:
            scores = scores + key_position_scores(expand_heads(k, q.shape[1]) * self.scale, table, index, q_len)
        return scores

    def score_mod(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> ScoreMod:
        """The bias as FlexAttention's score_mod: q (and k) scored against the rows of E_l the pairs use, (B, H, T, R)
        with R <= T in a causal stack, and each pair's score read at the row of its distance
        (`pair_scores.pair_score_mod`)."""
        low, first, last, rows = self.per_forward("flex_rows", q_pos, k_pos, self._flex_rows)
        offset = self.max_positions - 1
        table = self.distance[layer].weight[first + offset : last + offset + 1].T  # (dh, R)
        queries = torch.matmul(q * self.scale, table.to(q.dtype))  # as `query_position_scores` computes them
        keys = torch.matmul(expand_heads(k, q.shape[1]) * self.scale, table.to(k.dtype)) if self.key_term else None
        return pair_score_mod(q_pos, k_pos, low, rows, queries, keys)

    def _flex_rows(self, q_pos: Tensor, k_pos: Tensor) -> tuple[int, int, int, Tensor]:
        """(low, first, last, rows): the smallest distance i - j of a pair, the first and last distances whose
        rows of E_l the pairs read (in a causal stack i - j < 0 reads as 0), and the row each distance from low
        reads, counted from the first: (D,) long."""
        low, high = self._checked(*distance_span(q_pos, k_pos))
        first, last = (max(low, 0), max(high, 0)) if self.causal else (low, high)
        dist = torch.arange(low, high + 1, device=q_pos.device)
        return low, first, last, dist.clamp(min=first) - first


@register("relative_key_query")
class RelativeKeyQuery(RelativeKey):
    """bias_ij = scale * (q_i . E_l[i - j] + k_j . E_l[i - j]); one table per layer."""

    key_term = True
    cpu_bias_block_bytes = 16 * 2**20  # 16k forward 16.6 s a layer, 30.6 s at 4 MiB (docs/memory.md)
