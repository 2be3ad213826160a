"""Shared arithmetic of the relative encodings that look up a vector per (query, key) pair.

Shaw, BERT's relative_key / relative_key_query, Transformer-XL and DeBERTa all
score a content vector against a table of relative-position vectors r_idx(i, j):

    query side  s_ij = q_i . r_idx(i, j)        key side  s_ij = k_j . r_idx(i, j)

Materialising r_idx(i, j) for every pair costs (B, Tq, Tk, dh). Instead, every
content vector is scored against every table row once, (B, H, T, R), and the
score of each pair is then picked out with `gather`. R is the table length.
(Shaw's clipped table has its own bins: `clipped_bins`.)

When the positions count up by one in queries and keys alike (the default
position ids), row idx(i, j) = offset + i - j lies on a diagonal: the index is
then a `Diagonal`, and the pair scores are a strided view of the (T, R) scores
(the "skewing" of Huang et al. 2018, Music Transformer), with no gather and a
copy for a backward instead of a scatter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class Diagonal:
    """Pair (i, j) reads table row `offset + i - j`. A pair whose row falls outside the table is a masked
    one (a key after its query in a causal stack) and reads some finite value."""

    offset: int


def counts_up(pos: Tensor) -> bool:
    """Whether pos is one row, (1, T), of consecutive integers (synchronises the host once)."""
    return pos.shape[0] == 1 and (pos.shape[1] < 2 or bool((pos[0, 1:] - pos[0, :-1] == 1).all()))


def pair_rows(q_pos: Tensor, k_pos: Tensor, dist: Tensor | Callable[[], Tensor], low: int) -> Tensor | Diagonal:
    """The table row of each pair, dist - low with dist (B or 1, Tq, Tk) the distances i - j of these
    positions (or what makes them, called only when needed); a `Diagonal` when both count up by one
    (row q_pos[0] - k_pos[0] - low + i - j)."""
    if counts_up(q_pos) and counts_up(k_pos):
        return Diagonal(int(q_pos[0, 0]) - int(k_pos[0, 0]) - low)
    return (dist if isinstance(dist, Tensor) else dist()) - low


def _diagonal_scores(x: Tensor, table: Tensor, first: int, cols: int) -> Tensor:
    """out[..., i, j] = x_i . table[first - i + j]: x (..., T, dh), table (R, dh) or (H, R, dh) -> (..., T, cols).

    The skew of Music Transformer: x is scored against the table with zero rows around it, (..., T, width),
    and the pairs are a strided view of those scores (row i starts one element earlier than row i - 1 would).
    The zero rows make the scores arrive padded, so no padded copy of the (T, width) scores is made. A column
    outside [0, R) reads padding or a neighbouring row: a masked pair."""
    rows, length = x.shape[-2], table.shape[-2]
    left = max(0, -first)  # so that no pair starts before the scores
    first += left
    width = max(length + left, cols + 1, cols + first + 1 - rows)  # cols + 1: no two pairs share an element
    padded = F.pad(table, (0, 0, left, width - length - left))
    scores = torch.matmul(x, padded.transpose(-1, -2).to(x.dtype)).contiguous()  # (..., T, width)
    strides = scores.stride()[:-2] + (width - 1, 1)
    return scores.as_strided((*scores.shape[:-2], rows, cols), strides, scores.storage_offset() + first)


def relative_distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """q_pos: (B, Tq), k_pos: (B, Tk) -> i - j as (B, Tq, Tk), from the explicit positions."""
    return q_pos[:, :, None] - k_pos[:, None, :]


def expand_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, Hkv, T, dh) -> (B, H, T, dh): repeat each key/value head for its group of query heads (GQA)."""
    if x.shape[1] == n_heads:
        return x
    return x.repeat_interleave(n_heads // x.shape[1], dim=1)


def query_position_scores(q: Tensor, table: Tensor, index: Tensor | Diagonal, k_len: int = 0) -> Tensor:
    """s_ij = q_i . table[index_ij].

    q: (B, H, Tq, dh); table: (R, dh) shared by the heads or (H, R, dh) per head;
    index: (B or 1, Tq, Tk) long in [0, R), or a `Diagonal` with k_len = Tk -> (B, H, Tq, Tk).
    """
    if isinstance(index, Diagonal):  # the table upside down: row offset + i - j is row R - 1 - offset - i + j
        table, offset = _rows_read(table, index.offset, q.shape[-2], k_len)
        return _diagonal_scores(q, table.flip(-2), table.shape[-2] - 1 - offset, k_len)
    return gather_pairs(torch.matmul(q, table.transpose(-1, -2).to(q.dtype)), index)


def _rows_read(table: Tensor, offset: int, q_len: int, k_len: int) -> tuple[Tensor, int]:
    """The rows of table (R, dh) or (H, R, dh) that the pairs of a `Diagonal` read, offset + i - j for i < q_len and
    j < k_len, as a view, and the offset into it: a block of queries reads Tq + Tk - 1 rows of a table that may
    span every distance of the whole sequence."""
    low = min(max(0, offset - (k_len - 1)), table.shape[-2] - 1)
    high = max(min(table.shape[-2], offset + q_len), low + 1)
    return table[..., low:high, :], offset - low


def gather_pairs(scores: Tensor, index: Tensor) -> Tensor:
    """Each pair's score from its query's row: scores (B, H, Tq, R), index (B or 1, Tq, Tk) -> (B, H, Tq, Tk)."""
    b, h, tq, _ = scores.shape
    return scores.gather(-1, index[:, None].expand(b, h, tq, index.shape[-1]))


def key_position_scores(k: Tensor, table: Tensor, index: Tensor | Diagonal, q_len: int = 0) -> Tensor:
    """s_ij = k_j . table[index_ij].

    k: (B, H, Tk, dh); table: (R, dh) or (H, R, dh); index: (B or 1, Tq, Tk), or a `Diagonal` with
    q_len = Tq -> (B, H, Tq, Tk).

    Every key scored against every table row costs (Tk, R) per head; for a block of a few queries against many
    keys (`bias_blocks`), where R spans them all, the keys are scored in tiles against the rows their pairs read
    (a `Diagonal`), or each pair's row is gathered (any other index): (Tq, Tk) per head.
    """
    queries = q_len if isinstance(index, Diagonal) else index.shape[-2]
    narrow = NARROW_BLOCK * queries <= k.shape[-2]
    if isinstance(index, Diagonal):  # the pair (i, j) is row offset + i - j for key j
        table, offset = _rows_read(table, index.offset, q_len, k.shape[-2])
        if narrow:
            return _diagonal_key_scores_in_tiles(k, table, offset, q_len)
        return _diagonal_scores(k, table, offset, q_len).transpose(-1, -2)
    if narrow:
        return _key_scores_of_pairs(k, table, index)
    scores = torch.matmul(k, table.transpose(-1, -2).to(k.dtype))  # (B, H, Tk, R)
    b, h, tk, _ = scores.shape
    picked = scores.gather(-1, index.transpose(-1, -2)[:, None].expand(b, h, tk, index.shape[-2]))  # (B, H, Tk, Tq)
    return picked.transpose(-1, -2)


NARROW_BLOCK = 4  # keys per query at which a key's scores are taken pair by pair


def _diagonal_key_scores_in_tiles(k: Tensor, table: Tensor, offset: int, q_len: int) -> Tensor:
    """s_ij = k_j . table[offset + i - j] for a few queries over many keys: k (B, H, Tk, dh), table (R, dh) or
    (H, R, dh) -> (B, H, Tq, Tk). A pair whose row falls outside the table (a masked one) reads 0.

    The keys go in tiles of Tq: a tile's pairs read Tq + Tq - 1 consecutive rows of the table (upside down, so
    that later keys read later rows), which the tile scores at once, (Tq, 2 Tq - 1), and skews as
    `_diagonal_scores` does. Memory and work are twice the block's (Tq, Tk) scores per head, where gathering each
    pair's row would be dh times them."""
    keys = k.shape[-2]
    tile = q_len
    tiles = -(-keys // tile)
    k = F.pad(k, (0, 0, 0, tiles * tile - keys)).unflatten(-2, (tiles, tile))  # (B, H, n, tile, dh)
    span = q_len + tile - 1
    # key j reads row offset + i - j of the table, row R - 1 - offset - i + j of it upside down; tile t spans
    # upside-down rows first + t * tile + [0, span) with first = R - 1 - offset - (q_len - 1), padded to exist
    flipped, length = table.flip(-2), table.shape[-2]
    first = length - 1 - offset - (q_len - 1)
    before, after = max(0, -first), max(0, first + (tiles - 1) * tile + span - length)
    flipped = F.pad(flipped, (0, 0, before, after)).to(k.dtype)
    windows = flipped.narrow(-2, first + before, (tiles - 1) * tile + span).unfold(-2, span, tile)  # (.., n, dh, span)
    if table.dim() == 3:
        windows = windows[None]  # (1, H, n, dh, span)
    scores = torch.matmul(k, windows).contiguous()  # (B, H, n, tile, span): tile key jj, window row jj + q_len-1-i
    *lead, _, _ = scores.shape
    strides = scores.stride()[:-2] + (span + 1, 1)  # key jj reads window rows jj .. jj + q_len - 1: i reversed
    skewed = scores.as_strided((*lead, tile, q_len), strides, scores.storage_offset())
    return skewed.flip(-1).flatten(-3, -2)[..., :keys, :].transpose(-1, -2)


def _key_scores_of_pairs(k: Tensor, table: Tensor, rows: Tensor) -> Tensor:
    """s_ij = k_j . table[rows_ij], each pair's table row gathered: k (B, H, Tk, dh), table (R, dh) or (H, R, dh),
    rows (B or 1, Tq, Tk) -> (B, H, Tq, Tk). A row outside [0, R) (a masked pair) is clamped into it.

    Batched over keys: for each key (and batch row), its Tq gathered rows times its vector per head; a table per
    head is taken one head at a time, so that the gathered rows are (B or 1, Tk, Tq, dh) at most."""
    rows = rows.clamp(0, table.shape[-2] - 1).transpose(-1, -2)  # (Bi, Tk, Tq)
    keys = k.permute(0, 2, 3, 1)  # (B, Tk, dh, H)
    if table.dim() == 2:  # one table for every head
        return torch.matmul(table.to(k.dtype)[rows], keys).permute(0, 3, 2, 1)  # (B, Tk, Tq, H) -> (B, H, Tq, Tk)
    heads = [torch.matmul(table[h].to(k.dtype)[rows], keys[..., h : h + 1]) for h in range(table.shape[0])]
    return torch.cat(heads, dim=-1).permute(0, 3, 2, 1)
