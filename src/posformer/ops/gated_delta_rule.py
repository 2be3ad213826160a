"""The gated delta rule (Yang, Kautz and Hatamizadeh 2025, *Gated Delta Networks*), the sequence mixer of Qwen3-Next's
and Qwen3.5's linear-attention layers, in two forms that compute the same thing: `gated_delta_rule_chunked`
(training and prefill: chunks of C tokens in parallel, one sequential step per chunk, linear in length) and
`gated_delta_rule_recurrent` (decoding: one token at a time from a carried state).

Shapes: B batch, H heads, T tokens, dk key width, dv value width. Each head keeps a state S (dk, dv), a memory that
maps keys to values. Token t, with q_t, k_t (dk,), v_t (dv,), a log-decay g_t <= 0 and a write strength
beta_t in [0, 1], decays the state, corrects what it recalls for k_t towards v_t, and reads it with q_t:

    S'  = exp(g_t) S_{t-1}
    S_t = S' + beta_t k_t (v_t - S'^T k_t)^T        (the delta rule: S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1}
    o_t = scale * S_t^T q_t                                                          + beta_t k_t v_t^T)

Everything is computed in float32 and the output is cast back to the dtype of v.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer.utils.validation import check_int, fail

CHUNKS_AT_ONCE = 16  # chunks whose within-chunk terms are computed together


def check_rule_inputs(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor | None) -> None:
    """q, k (B, H, T, dk), v (B, H, T, dv), g and beta (B, H, T), state None or (B, H, dk, dv); else a ValueError
    naming the tensor."""
    if q.dim() != 4 or k.shape != q.shape:
        fail("k.shape", tuple(k.shape), f"q's shape (B, H, T, dk), {tuple(q.shape)}")
    if v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        fail("v.shape", tuple(v.shape), f"(B, H, T, dv) with (B, H, T) = {tuple(q.shape[:3])}")
    for name, tensor in (("g", g), ("beta", beta)):
        if tensor.shape != q.shape[:3]:
            fail(f"{name}.shape", tuple(tensor.shape), f"(B, H, T) = {tuple(q.shape[:3])}")
    expected = (*q.shape[:2], q.shape[3], v.shape[3])
    if state is not None and tuple(state.shape) != expected:
        fail("state.shape", tuple(state.shape), f"None or (B, H, dk, dv) = {expected}")


def _float32(*tensors: Tensor) -> list[Tensor]:
    return [t.float() for t in tensors]


def gated_delta_rule_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    state: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The rule one token at a time, from `state` (zeros when None).

    q, k: (B, H, T, dk); v: (B, H, T, dv); g: (B, H, T) log-decays (<= 0); beta: (B, H, T) write strengths;
    state: (B, H, dk, dv) or None; scale: the read's scale, None for dk ** -0.5.
    Returns the outputs (B, H, T, dv) in v's dtype and the state after the last token (B, H, dk, dv), float32.
    """
    check_rule_inputs(q, k, v, g, beta, state)
    out_dtype = v.dtype
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, g, beta = _float32(q, k, v, g, beta)
    batch, heads, length, key_dim = k.shape
    memory = k.new_zeros(batch, heads, key_dim, v.shape[-1]) if state is None else state.float()
    outputs = []
    for t in range(length):
        memory = memory * g[:, :, t, None, None].exp()
        recalled = torch.einsum("bhkv,bhk->bhv", memory, k[:, :, t])
        correction = beta[:, :, t, None] * (v[:, :, t] - recalled)  # (B, H, dv)
        memory = memory + k[:, :, t, :, None] * correction[:, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", memory, q[:, :, t]) * scale)
    out = torch.stack(outputs, dim=2) if outputs else v.new_zeros(v.shape)
    return out.to(out_dtype), memory


def _chunk_terms(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, later: Tensor, identity: Tensor
) -> tuple[Tensor, ...]:
    """What the chunks (B, H, N, C, ...) compute in parallel, before the state passes through them in order:
    (written, reads_state, within, q_decayed, k_to_end, chunk_decay), see `gated_delta_rule_chunked`. `later`
    (C, C) bool is True where s > r, `identity` the (C, C) float32 identity: made once per call."""
    gamma = g.cumsum(-1)  # (B, H, N, C)
    decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(later, float("-inf")).exp()  # D (.., C, C)
    k_beta = k * beta[..., None]
    system = (k_beta @ k.transpose(-1, -2) * decay).tril(-1) + identity  # I + A
    written = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False, unitriangular=True)
    reads_state = torch.linalg.solve_triangular(
        system, k_beta * gamma.exp()[..., None], upper=False, unitriangular=True
    )
    within = q @ k.transpose(-1, -2) * decay  # (B, H, N, C, C), zero above the diagonal
    q_decayed = q * gamma.exp()[..., None]
    k_to_end = k * (gamma[..., -1:] - gamma).exp()[..., None]
    return written, reads_state, within, q_decayed, k_to_end, gamma[..., -1].exp()


def gated_delta_rule_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    chunk_size: int = 64,
    state: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The rule over chunks of `chunk_size` tokens: the tokens of a chunk in parallel, the chunks in order.

    Same arguments and results as `gated_delta_rule_recurrent`. Within a chunk of C tokens (r, s = 1..C), with
    gamma_r the cumulative log-decay from the chunk's start and D_rs = exp(gamma_r - gamma_s) for s <= r (0 above),
    the values each token writes, u_s = beta_s (v_s - S'_s^T k_s), solve one unit lower-triangular system
    (the WY / UT form of DeltaNet, Yang et al. 2024):

        (I + A) U = beta V - (beta exp(gamma) K) S_0,     A_sj = beta_s D_sj k_s . k_j  for j < s
        O   = scale * ((exp(gamma) Q) S_0 + (Q K^T * D) U)
        S_C = exp(gamma_C) S_0 + (exp(gamma_C - gamma) K)^T U

    Cost per chunk O(C^2 (dk + dv) + C dk dv): time and memory grow linearly with T at a fixed chunk size. The
    (C, C) terms are made for CHUNKS_AT_ONCE chunks at a time, so that without autograd they are held for those
    chunks only.
    The sequence is padded to a multiple of C with tokens that neither decay (g = 0) nor write (beta = 0).
    """
    check_int("chunk_size", chunk_size, maximum=2**16)
    check_rule_inputs(q, k, v, g, beta, state)
    out_dtype = v.dtype
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, g, beta = _float32(q, k, v, g, beta)
    batch, heads, length, key_dim = k.shape
    value_dim = v.shape[-1]
    pad = -length % chunk_size
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    chunks = (length + pad) // chunk_size

    def in_chunks(x: Tensor) -> Tensor:  # (B, H, T', ...) -> (B, H, N, C, ...)
        return x.unflatten(2, (chunks, chunk_size))

    q, k, v, g, beta = (in_chunks(x) for x in (q, k, v, g, beta))
    memory = k.new_zeros(batch, heads, key_dim, value_dim) if state is None else state.float()
    later = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).triu(1)  # s > r
    identity = torch.eye(chunk_size, device=q.device)
    outputs = []
    for first in range(0, chunks, CHUNKS_AT_ONCE):
        group = slice(first, min(first + CHUNKS_AT_ONCE, chunks))
        parts = (x[:, :, group] for x in (q, k, v, g, beta))
        terms = _chunk_terms(*parts, later, identity)
        written, reads_state, within, q_decayed, k_to_end, chunk_decay = terms
        for n in range(written.shape[2]):
            u = written[:, :, n] - reads_state[:, :, n] @ memory  # (B, H, C, dv)
            outputs.append(q_decayed[:, :, n] @ memory + within[:, :, n] @ u)
            memory = memory * chunk_decay[:, :, n, None, None] + k_to_end[:, :, n].transpose(-1, -2) @ u
    out = torch.cat(outputs, dim=2)[:, :, :length] * scale if outputs else v.new_zeros(batch, heads, 0, value_dim)
    return out.to(out_dtype), memory
