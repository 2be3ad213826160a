"""Shared arithmetic of the relative encodings that look up a vector per (query, key) pair.

Shaw, BERT's relative_key / relative_key_query, Transformer-XL and DeBERTa all
score a content vector against a table of relative-position vectors r_idx(i, j):

    query side  s_ij = q_i . r_idx(i, j)        key side  s_ij = k_j . r_idx(i, j)

Materialising r_idx(i, j) for every pair costs (B, Tq, Tk, dh). Instead, every
content vector is scored against every table row once, (B, H, T, R), and the
score of each pair is then picked out with `gather`; the value side of Shaw
does the reverse with `scatter_add`. R is the table length (2k+1 for Shaw).
"""

from __future__ import annotations

import torch
from torch import Tensor


def relative_distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """q_pos: (B, Tq), k_pos: (B, Tk) -> i - j as (B, Tq, Tk), from the explicit positions."""
    return q_pos[:, :, None] - k_pos[:, None, :]


def expand_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, Hkv, T, dh) -> (B, H, T, dh): repeat each key/value head for its group of query heads (GQA)."""
    if x.shape[1] == n_heads:
        return x
    return x.repeat_interleave(n_heads // x.shape[1], dim=1)


def query_position_scores(q: Tensor, table: Tensor, index: Tensor) -> Tensor:
    """s_ij = q_i . table[index_ij].

    q: (B, H, Tq, dh); table: (R, dh) shared by the heads or (H, R, dh) per head;
    index: (B or 1, Tq, Tk) long in [0, R) -> (B, H, Tq, Tk).
    """
    scores = torch.matmul(q, table.transpose(-1, -2).to(q.dtype))  # (B, H, Tq, R)
    b, h, tq, _ = scores.shape
    return scores.gather(-1, index[:, None].expand(b, h, tq, index.shape[-1]))


def key_position_scores(k: Tensor, table: Tensor, index: Tensor) -> Tensor:
    """s_ij = k_j . table[index_ij].

    k: (B, H, Tk, dh); table: (R, dh) or (H, R, dh); index: (B or 1, Tq, Tk) -> (B, H, Tq, Tk).
    """
    scores = torch.matmul(k, table.transpose(-1, -2).to(k.dtype))  # (B, H, Tk, R)
    b, h, tk, _ = scores.shape
    picked = scores.gather(-1, index.transpose(-1, -2)[:, None].expand(b, h, tk, index.shape[-2]))  # (B, H, Tk, Tq)
    return picked.transpose(-1, -2)


def position_weighted_values(probs: Tensor, table: Tensor, index: Tensor) -> Tensor:
    """o_i = sum_j probs_ij table[index_ij].

    probs: (B, H, Tq, Tk); table: (R, dh); index: (B or 1, Tq, Tk) -> (B, H, Tq, dh).
    The probabilities that share a table row are summed first (scatter_add), then
    multiplied by the table once: (B, H, Tq, R) @ (R, dh).
    """
    b, h, tq, tk = probs.shape
    per_row = probs.new_zeros(b, h, tq, table.shape[0])
    per_row.scatter_add_(-1, index[:, None].expand(b, h, tq, tk), probs)
    return torch.matmul(per_row, table.to(probs.dtype))
