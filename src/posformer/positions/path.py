"""PaTH (Yang, Shen, Wen, Tan, Mishra, Ren, Panda, Kim, NeurIPS 2025, "PaTH Attention: Position Encoding via
Accumulating Householder Transformations"): positions as data-dependent transforms accumulated between key and query.

Each token t writes, per head, a unit vector w_t = normalize(W_w x_t) and a strength beta_t = 2 sigmoid(W_b x_t) in
(0, 2); its transform is H_t = I - beta_t w_t w_t^T. The score of query i and key j <= i is

    q_i^T H_i H_{i-1} ... H_{j+1} k_j

(the transforms of the tokens after the key up to the query; none when j = i). beta = 0 gives NoPE; with beta = 2
each H_t is a reflection, so the accumulated transform is orthogonal. The paper's short convolution on w is left out.

The scores are exact, in chunks of C = 64 tokens as the paper computes them (`path_scores`): within a chunk, the
products of the tokens' transforms come from unit triangular systems (the UT transform), solved for every key and
query of the chunk at once; across chunks, each key is carried once to its chunk's end and each chunk's whole
transform is one dh x dh matrix, so that a query crosses a chunk with one product: O(T C dh + T^2 dh^2 / C) work
and no step per token. Chunks group into spans of SPAN chunks, each key also carried to its span's end and each
span's transform one matrix too: a chunk of queries crosses the earlier chunks of its span one at a time and each
earlier span whole, SPAN + T / (C SPAN) products in sequence rather than T / C. The paper's kernel keeps the
crossing in low-rank form and fuses it with the attention.

The scores reach the attention as a bias, scale * (path score - q.k), through `contract.ReadsHidden` (the key
terms [w, beta] live in the KV cache), in blocks of queries at long lengths as every bias (each block checkpointed
in training). The work on the keys (`key_work`: the carried keys and the crossings, O(T dh) per head) is done once
per attention call (`shared_key_work`) and read by every block, which solves only its own chunks: memory grows as
T, not T^2. FlexAttention cannot take it (a score_mod sees one pair).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from posformer.positions.forgetting import HiddenStateBias, wide
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes

CHUNK = 64  # tokens per chunk of the chunked algorithm
SPAN = 16  # chunks per span: a query crosses the chunks of its own span one at a time, earlier spans whole
KEY_WORK_BYTES = 4 * 2**20  # the (C, C) systems of the keys' chunks are solved this many float32 bytes at a time


def _chunked(x: Tensor, chunks: int, front: int = 0) -> Tensor:
    """(B, H, T, ...) -> (B, H, chunks, CHUNK, ...): `front` zero rows first, zeros after to fill the chunks."""
    back = chunks * CHUNK - front - x.shape[2]
    pad = [0, 0] * (x.dim() - 3) + [front, back]
    return F.pad(x, pad).unflatten(2, (chunks, CHUNK))


def _triangles(w: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """I + L and I + U of a chunk, (B, H, n, C, C): L[s, t] = beta_t w_s . w_t for t < s, U the same for t > s."""
    coupled = (w @ w.transpose(-1, -2)) * beta[..., None, :]
    eye = torch.eye(w.shape[-2], dtype=w.dtype, device=w.device)
    return eye + coupled.tril(-1), eye + coupled.triu(1)


def _through(system: Tensor, rhs: Tensor, upper: bool) -> Tensor:
    return torch.linalg.solve_triangular(system, rhs, upper=upper, unitriangular=True)


def _keys_carried(kc: Tensor, wc: Tensor, bc: Tensor, lower: Tensor) -> tuple[Tensor, Tensor]:
    """(c[s, j] (B, H, n, C, C), each key carried to its chunk's end (B, H, n, C, dh)): c solves
    (I + L) c = (w_s . k_j)[s > j]; D k_j = k_j - sum_s beta_s c_s w_s."""
    slots = torch.arange(CHUNK, device=kc.device)
    after = (slots[:, None] > slots[None, :]).to(kc.dtype)  # [s > j], (s, j)
    carry = _through(lower, (wc @ kc.transpose(-1, -2)) * after, upper=False)
    return carry, kc - (carry * bc[..., None]).transpose(-1, -2) @ wc


def key_work(k: Tensor, w: Tensor, beta: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """What every block of queries reads of the keys, once, in chunks of C keys from key 0 and spans of SPAN chunks:
    each key carried to its chunk's end and to its span's end, and the matrix with which a query row crosses each
    whole chunk and each whole span (the row times the transforms' product).

    k, w: (B, H, S, dh); beta: (B, H, S) -> (keys at their chunk's end (B, H, n, C, dh), chunk crossings
    (B, H, n, dh, dh), keys at their span's end (B, H, m, SPAN C, dh), span crossings (B, H, m, dh, dh)),
    n = ceil(S / C) (the last chunk padded with keys of strength 0), m = floor(n / SPAN) (whole spans only). The
    chunks' (C, C) systems are solved a group of chunks at a time (`KEY_WORK_BYTES`), so that no temporary grows as
    S * C.
    """
    chunks, (batch, heads, _, dim) = -(-k.shape[2] // CHUNK), k.shape
    group = max(1, KEY_WORK_BYTES // (batch * heads * CHUNK * CHUNK * 4))
    eye = torch.eye(dim, dtype=k.dtype, device=k.device)
    carried, crossings = [k.new_zeros(batch, heads, 0, CHUNK, dim)], [k.new_zeros(batch, heads, 0, dim, dim)]
    for first in range(0, chunks, group):
        tokens = slice(first * CHUNK, (first + group) * CHUNK)
        kc, wc, bc = (_chunked(x[:, :, tokens], min(group, chunks - first)) for x in (k, w, beta))
        lower, upper = _triangles(wc, bc)
        carried.append(_keys_carried(kc, wc, bc, lower)[1])
        weighted = (wc * bc[..., None]).transpose(-1, -2)  # (B, H, n, dh, C): beta_s w_s
        crossings.append((eye - weighted @ _through(upper, wc, True)).mT)
    carried_keys, crossing = torch.cat(carried, dim=2), torch.cat(crossings, dim=2)
    return carried_keys, crossing, *_spans(carried_keys, crossing)


def _spans(carried_keys: Tensor, crossing: Tensor) -> tuple[Tensor, Tensor]:
    """(keys at their span's end (B, H, m, SPAN C, dh), span crossings (B, H, m, dh, dh)) from the chunks' own.

    A row x crosses chunk c as x M_c, so it scores key k of chunk c < u from chunk u's start as
    x M_{u-1} ... M_{c+1} . k = x . k M_{c+1}^T ... M_{u-1}^T: each chunk's keys times the suffix products of the
    later chunks of the span, and the span's crossing M_last ... M_first, in SPAN steps for all spans at once."""
    spans, (batch, heads, _, _, dim) = carried_keys.shape[2] // SPAN, carried_keys.shape  # whole spans: a query
    # crosses no span that ends after its own chunk
    keys = carried_keys[:, :, : spans * SPAN].unflatten(2, (spans, SPAN))
    steps = crossing[:, :, : spans * SPAN].unflatten(2, (spans, SPAN))
    later = torch.eye(dim, dtype=crossing.dtype, device=crossing.device).expand(batch, heads, spans, dim, dim)
    at_end = []  # later: M_{c+1}^T ... M_last^T, from the span's last chunk down
    for c in range(SPAN - 1, -1, -1):
        at_end.append(keys[:, :, :, c] @ later)
        later = steps[:, :, :, c].mT @ later
    return torch.cat(at_end[::-1], dim=-2), later.mT


def path_scores(
    q: Tensor, k: Tensor, w: Tensor, beta: Tensor, first: int, shared: tuple[Tensor, ...] | None = None
) -> Tensor:
    """q_i^T H_i ... H_{j+1} k_j for queries at key indices first, first + 1, ... and every key: (B, H, Tq, Tk),
    any value past each query.

    q: (B, H, Tq, dh); k, w: (B, H, Tk, dh); beta: (B, H, Tk); Tk >= first + Tq; shared: `key_work` of these keys
    or of more keys that begin with them (computed here when None). In chunks of C tokens, with no step per token.
    Key j carried through the later tokens of its chunk, D k_j = k_j - sum_s beta_s c_s w_s, has coefficients c
    that solve (I + L) c = (w_s . k_j)[s > j], one unit lower triangular system for every key of a chunk at once;
    a query carried back to its chunk's start solves (I + U) c' = (w_s . q_l)[s <= l] likewise. The scores within
    a chunk follow from the first, q_l . D_l k_j = q_l . k_j - sum_{j < s <= l} beta_s (q_l . w_s) c_s. Across
    chunks a query crosses the earlier chunks of its span one at a time, then each earlier span whole (`key_work`):
    about SPAN + n / SPAN products per query chunk. Only the queries' own chunks are solved here; the chunks
    before them are `shared`, the same for every block of queries. Memory: the (Tq, Tk) scores and `shared`'s
    O(Tk dh).
    """
    length, keys = q.shape[2], k.shape[2]
    if length == 0:
        return q.new_zeros(*q.shape[:2], 0, keys)
    own, lead = first // CHUNK, first % CHUNK  # the first query's chunk, and its place in it
    q_chunks = -(-(lead + length) // CHUNK)
    k_chunks = own + q_chunks  # the chunks of keys that the queries reach
    if shared is None:  # the chunks some query crosses: all but the last query's own
        shared = key_work(*(x[:, :, : (k_chunks - 1) * CHUNK] for x in (k, w, beta)))
    mine = slice(own * CHUNK, k_chunks * CHUNK)  # the keys of the queries' own chunks
    kc, wc, bc = (_chunked(x[:, :, mine], q_chunks) for x in (k, w, beta))
    lower, upper = _triangles(wc, bc)
    carry_keys = _keys_carried(kc, wc, bc, lower)[0]
    slots = torch.arange(CHUNK, device=q.device)
    upto = (slots[:, None] <= slots[None, :]).to(q.dtype)  # [s <= l], (s, l)
    qc = _chunked(q, q_chunks, lead)
    if q_chunks == 1:  # one chunk: its padding rows are left out
        qc, upto, lead = qc[:, :, :, lead : lead + length], upto[:, lead : lead + length], 0
    reach = (wc @ qc.transpose(-1, -2)) * upto  # (w_s . q_l)[s <= l]
    local = qc @ kc.transpose(-1, -2) - (reach * bc[..., None]).mT @ carry_keys
    carried = qc - (_through(upper, reach, True) * bc[..., None]).mT @ wc  # each query at its chunk's start
    rows = []
    for u in range(q_chunks):
        later = (q_chunks - u - 1) * CHUNK  # the keys of the block's later chunks: after every query of chunk u
        parts = _crossed(carried[:, :, u], own + u, shared) + [local[:, :, u]]
        if later:
            parts.append(local.new_zeros(*local.shape[:2], local.shape[-2], later))
        rows.append(_row(parts, keys))
    return rows[0] if q_chunks == 1 else torch.cat(rows, dim=-2)[:, :, lead : lead + length]


def _crossed(x: Tensor, chunk: int, shared: tuple[Tensor, ...]) -> list[Tensor]:
    """The scores of rows x (B, H, R, dh), queries carried to the start of `chunk`, over every key before it, in key
    order: (B, H, R, C) for each earlier chunk of its span, then (B, H, R, SPAN C) for each earlier span."""
    span = chunk // SPAN
    # one slice of each, not an index per step: the backward of each makes a gradient as large as what it cuts
    chunk_keys, chunk_crossing = (part[:, :, span * SPAN : chunk] for part in shared[:2])
    span_keys, span_crossing = (part[:, :, :span] for part in shared[2:])
    steps = [(chunk_keys[:, :, c], chunk_crossing[:, :, c]) for c in range(chunk - span * SPAN - 1, -1, -1)]
    steps += [(span_keys[:, :, s], span_crossing[:, :, s]) for s in range(span - 1, -1, -1)]
    parts = []
    for step, (carried_keys, crossing) in enumerate(steps):
        parts.append(x @ carried_keys.transpose(-1, -2))
        if step + 1 < len(steps):
            x = x @ crossing
    return parts[::-1]


def _row(parts: list[Tensor], keys: int) -> Tensor:
    """Score pieces (B, H, R, width) in key order, joined and cut, or padded with zeros, to `keys` columns."""
    extra = sum(part.shape[-1] for part in parts) - keys
    while extra > 0 and parts[-1].shape[-1] <= extra:
        extra -= parts.pop().shape[-1]
    if extra > 0:
        parts[-1] = parts[-1][..., : parts[-1].shape[-1] - extra]
    elif extra < 0:  # keys past the queries' last chunk (no causal order in the blocks)
        parts.append(parts[-1].new_zeros(*parts[-1].shape[:-1], -extra))
    return torch.cat(parts, dim=-1)


@torch.compiler.disable  # the chunks follow the first query's index, a value: `compiles_whole` is False
def _scores(
    q: Tensor, k: Tensor, w: Tensor, beta: Tensor, q_index: Tensor, shared: tuple[Tensor, ...] | None
) -> Tensor:
    """`path_scores` of the queries at key indices q_index (contiguous)."""
    return path_scores(q, k, w, beta, int(q_index[0]) if q_index.numel() else 0, shared)


@register("path")
class PaTH(HiddenStateBias):
    """PaTH attention (see the module docstring). Parameters: `beta_bias_init` (default 0: beta = 1 at the start)."""

    defaults = {"beta_bias_init": 0.0}
    compiles_whole = False  # the chunk layout follows the first query's index (`_scores`)
    flex_refusal = "its score is a product of transforms over the tokens between query and key"

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        init = params["beta_bias_init"]
        if not isinstance(init, (int, float)) or isinstance(init, bool) or not abs(init) < float("inf"):
            raise cls.param_error(cls.name, "beta_bias_init", init, "a finite number (the strengths' initial logit)")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        heads, dim = sizes.n_heads, sizes.head_dim
        self.w_weight = nn.Parameter(torch.randn(n_layers, heads * dim, sizes.d_model) * sizes.init_std)
        self.beta_weight = nn.Parameter(torch.randn(n_layers, heads, sizes.d_model) * sizes.init_std)
        self.beta_bias = nn.Parameter(torch.full((n_layers, heads), float(self.params["beta_bias_init"])))

    def token_terms(self, x: Tensor, layer: int) -> tuple[None, Tensor]:
        """x (B, T, d_model) -> (None, [w, beta] (B, H, T, dh + 1)): each token's unit vector and strength."""
        dtype = wide(x)
        x = x.to(dtype)
        w = F.linear(x, self.w_weight[layer].to(dtype)).unflatten(-1, (self.n_heads, self.head_dim))
        w = F.normalize(w, dim=-1)
        beta = 2 * torch.sigmoid(F.linear(x, self.beta_weight[layer].to(dtype), self.beta_bias[layer].to(dtype)))
        return None, torch.cat((w, beta[..., None]), dim=-1).transpose(1, 2)

    def shared_key_work(self, k_terms: Tensor, k: Tensor, layer: int) -> tuple[Tensor, ...]:
        """The keys' `key_work`, once for every block of queries: k_terms (B, H, S, dh + 1), k (B, Hkv, S, dh) ->
        the keys carried to their chunk's and span's ends and the chunks' and spans' crossings."""
        w, beta = k_terms[..., :-1], k_terms[..., -1]
        k = self._key_heads(k, k_terms)
        if not torch.is_grad_enabled():
            return key_work(k, w, beta)
        # recomputed in the backward: what its graph would keep is a few (T, C) tensors per head and layer
        return checkpoint(key_work, k, w, beta, use_reentrant=False)

    def terms_bias(
        self,
        q_terms: Tensor | None,
        k_terms: Tensor,
        q_index: Tensor,
        layer: int,
        q: Tensor,
        k: Tensor,
        shared: tuple[Tensor, ...] | None = None,
    ) -> Tensor:
        """-> scale * (q_i^T H_i ... H_{j+1} k_j - q_i . k_j): (B, H, Tq, Tk); q (B, H, Tq, dh), k (B, Hkv, Tk, dh);
        shared: `shared_key_work` of these keys or of more keys that begin with them, or None."""
        w, beta = k_terms[..., :-1], k_terms[..., -1]
        q, k = q.to(k_terms.dtype), self._key_heads(k, k_terms)
        scores = _scores(q, k, w, beta, q_index, shared)
        return scores.sub_(torch.matmul(q, k.transpose(-1, -2))).mul_(self.scale)

    @staticmethod
    def _key_heads(k: Tensor, k_terms: Tensor) -> Tensor:
        """k (B, Hkv, Tk, dh) in the terms' dtype, one head per query head: (B, H, Tk, dh)."""
        k = k.to(k_terms.dtype)
        return k if k.shape[1] == k_terms.shape[1] else k.repeat_interleave(k_terms.shape[1] // k.shape[1], dim=1)

    def terms_score_mod(self, q_terms: Tensor | None, k_terms: Tensor, q_index: Tensor, layer: int) -> None:
        return None
