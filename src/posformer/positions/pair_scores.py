"""The relative encodings that score content against a table of positions, as FlexAttention score_mods.

BERT's relative_key (q_i . E[i - j]) and relative_key_query (+ k_j . E[i - j]), and DeBERTa's c2p
(q_i . K^r[idx(i - j)]) and p2c (k_j . Q^r[idx(i - j)]), score a query or a key against the table row of the
pair's distance. Every query and every key is scored against every row once, as the eager path does
(`relative_scores`): tables (B, H, Tq, R) and (B, H, Tk, R), O(T) for a table of R rows. The score_mod then reads
each pair's score at the row of its distance, rows[i - j - low] from a (D,) lookup of the distances that occur,
so no (Tq, Tk) tensor is ever made.
"""

from __future__ import annotations

from torch import Tensor

from posformer.ops.flex import ScoreMod
from posformer.positions.per_forward import batch_rows


def distance_span(q_pos: Tensor, k_pos: Tensor) -> tuple[int, int]:
    """The smallest and largest distance q_pos - k_pos between a query and a key of the same batch row (a host
    synchronisation): q_pos (B or 1, Tq), k_pos (B or 1, Tk)."""
    low = (q_pos.min(-1).values - k_pos.max(-1).values).min()
    high = (q_pos.max(-1).values - k_pos.min(-1).values).max()
    return int(low), int(high)


def pair_score_mod(
    q_pos: Tensor,
    k_pos: Tensor,
    low: int,
    rows: Tensor,
    query_scores: Tensor | None,
    key_scores: Tensor | None,
) -> ScoreMod:
    """bias(b, h, i, j) = query_scores[b, h, i, r] + key_scores[b, h, j, r] at the row r = rows[q_pos[b, i] -
    k_pos[b, j] - low] of the pair's distance (either term may be None, not both).

    q_pos (B or 1, Tq), k_pos (B or 1, Tk); rows: (D,) long, the table row of each distance low, ..., low + D - 1,
    which must cover every pair's; query_scores: (B, H, Tq, R), key_scores: (B, H, Tk, R).
    """
    batch = (query_scores if query_scores is not None else key_scores).shape[0]
    q_rows = (batch_rows(q_pos) - low).expand(batch, -1)  # q_rows - k_rows is a pair's distance less low
    k_rows = batch_rows(k_pos).expand(batch, -1)

    def add_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        row = rows[q_rows[b, q_idx] - k_rows[b, kv_idx]]
        if key_scores is None:
            return score + query_scores[b, h, q_idx, row].to(score.dtype)
        if query_scores is None:
            return score + key_scores[b, h, kv_idx, row].to(score.dtype)
        return score + (query_scores[b, h, q_idx, row] + key_scores[b, h, kv_idx, row]).to(score.dtype)

    return add_bias
