"""PaTH attention: the score against the paper's formula with the transforms written out as matrices, beta = 0
gives NoPE, and with beta = 2 the accumulated transform is orthogonal. The conformance suite runs it as every
encoding (cached decoding, left padding, blocks of queries, 4x the length, gradients)."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
import posformer.positions.path as path_module
from tests.conftest import tiny

HEADS, DIM = 2, 8


def _path(beta_bias_init: float = 0.0) -> pf.positions.PositionEncoding:
    cfg = tiny("decoder", d_model=HEADS * DIM, n_heads=HEADS, position="path", init_std=0.5)
    cfg = cfg.replace(position_params={"beta_bias_init": beta_bias_init})
    return pf.positions.build(cfg, causal=True, n_layers=1).double()


def _scores(path, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_index: torch.Tensor) -> torch.Tensor:
    """The path scores q_i^T P_ij k_j as the encoding gives them: its bias / scale plus q.k."""
    _, terms = path.token_terms(x, 0)
    return path.terms_bias(None, terms, q_index, 0, q, k) / path.scale + q @ k.transpose(-1, -2)


@pytest.mark.parametrize("chunk", [64, 4, 3])
@pytest.mark.parametrize("queries", [11, 4, 1])
def test_scores_follow_the_product_of_householder_matrices(chunk: int, queries: int, monkeypatch) -> None:
    """Every query over every key before it, the last `queries` of 11 tokens (a cache before them), in chunks of 64
    (one chunk), 4 and 3 (queries and keys across chunks, the first query inside one)."""
    monkeypatch.setattr(path_module, "CHUNK", chunk)
    torch.manual_seed(0)
    path = _path()
    x = torch.randn(1, 11, HEADS * DIM, dtype=torch.float64)
    q, k = torch.randn(1, HEADS, 11, DIM, dtype=torch.float64), torch.randn(1, HEADS, 11, DIM, dtype=torch.float64)
    _, terms = path.token_terms(x, 0)
    w, beta = terms[0, ..., :-1], terms[0, ..., -1]
    eye = torch.eye(DIM, dtype=torch.float64)
    expected = torch.zeros(1, HEADS, 11, 11, dtype=torch.float64)
    for h in range(HEADS):
        for i in range(11):
            transform = eye.clone()  # H_i ... H_{j+1}, grown one factor on the right as j goes down
            for j in range(i, -1, -1):
                expected[0, h, i, j] = q[0, h, i] @ transform @ k[0, h, j]
                transform = transform @ (eye - beta[h, j] * torch.outer(w[h, j], w[h, j]))
    rows = slice(11 - queries, 11)
    _, terms = path.token_terms(x, 0)
    bias = path.terms_bias(None, terms, torch.arange(11)[rows], 0, q[:, :, rows], k)
    ours = bias / path.scale + q[:, :, rows] @ k.transpose(-1, -2)
    causal = torch.ones(11, 11, dtype=torch.bool).tril()[rows]
    torch.testing.assert_close(ours[..., causal], expected[:, :, rows][..., causal])


def test_strength_zero_is_nope() -> None:
    torch.manual_seed(1)
    path = _path(beta_bias_init=-1e4)  # beta = 2 sigmoid(-1e4) = 0
    x = torch.randn(2, 5, HEADS * DIM, dtype=torch.float64)
    q, k = torch.randn(2, HEADS, 5, DIM, dtype=torch.float64), torch.randn(2, HEADS, 5, DIM, dtype=torch.float64)
    _, terms = path.token_terms(x, 0)
    bias = path.terms_bias(None, terms, torch.arange(5), 0, q, k)  # the path scores less q.k, summed two ways
    torch.testing.assert_close(bias, torch.zeros_like(bias), atol=1e-12, rtol=0)


def test_strength_two_makes_the_accumulated_transform_orthogonal() -> None:
    """With beta = 2 every H_t is a reflection: the last query scores each earlier key as P k_j, and the basis
    vectors as queries read P k_j's coordinates, whose squares sum to |k_j|^2."""
    torch.manual_seed(2)
    path = _path(beta_bias_init=1e4)  # beta = 2
    x = torch.randn(1, 7, HEADS * DIM, dtype=torch.float64).expand(DIM, -1, -1)
    k = torch.randn(1, HEADS, 7, DIM, dtype=torch.float64).expand(DIM, -1, -1, -1)
    basis = torch.eye(DIM, dtype=torch.float64)[:, None, None, :].expand(DIM, HEADS, 1, DIM)  # query m = e_m
    coordinates = _scores(path, x, basis, k, torch.tensor([6]))[:, :, 0]  # (m, H, j): (P k_j)_m
    torch.testing.assert_close(coordinates.square().sum(0), k[0].square().sum(-1))
    moved = coordinates[:, :, :6].permute(1, 2, 0) - k[0, :, :6]  # (H, j, m): P k_j - k_j
    assert moved.abs().max() > 1e-2  # the reflections did turn the keys


def _product_of_transforms(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """q_i^T H_i ... H_{j+1} k_j with every H_t = I - beta_t w_t w_t^T written out as a matrix, pair by pair:
    q, k, w (H, T, dh), beta (H, T) -> (H, T, T), zero past each query."""
    heads, length, dim = q.shape
    eye = torch.eye(dim, dtype=q.dtype)
    scores = torch.zeros(heads, length, length, dtype=q.dtype)
    for h in range(heads):
        for i in range(length):
            transform = eye.clone()
            for j in range(i, -1, -1):
                scores[h, i, j] = q[h, i] @ transform @ k[h, j]
                transform = transform @ (eye - beta[h, j] * torch.outer(w[h, j], w[h, j]))
    return scores


@pytest.mark.parametrize("first, queries", [(0, 23), (13, 10), (22, 1)])
def test_keys_across_spans_follow_the_product_of_householder_matrices(first: int, queries: int, monkeypatch) -> None:
    """23 tokens in chunks of 3 and spans of 2 chunks: a query crosses the earlier chunks of its span one at a time and
    each earlier span whole, from the work on all 23 keys (`shared_key_work`) or on its own keys alone (None)."""
    monkeypatch.setattr(path_module, "CHUNK", 3)
    monkeypatch.setattr(path_module, "SPAN", 2)
    torch.manual_seed(3)
    path = _path(beta_bias_init=1.0)
    x = torch.randn(1, 23, HEADS * DIM, dtype=torch.float64)
    q, k = torch.randn(1, HEADS, 23, DIM, dtype=torch.float64), torch.randn(1, HEADS, 23, DIM, dtype=torch.float64)
    _, terms = path.token_terms(x, 0)
    expected = _product_of_transforms(q[0], k[0], terms[0, ..., :-1], terms[0, ..., -1])
    rows = slice(first, first + queries)
    causal = torch.ones(23, 23, dtype=torch.bool).tril()[rows]
    for shared in (path.shared_key_work(terms, k, 0), None):
        bias = path.terms_bias(None, terms, torch.arange(23)[rows], 0, q[:, :, rows], k, shared=shared)
        ours = bias / path.scale + q[:, :, rows] @ k.transpose(-1, -2)
        torch.testing.assert_close(ours[0][..., causal], expected[:, rows][..., causal])
