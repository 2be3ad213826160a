"""DeBERTa's disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", section 3.1), in its DeBERTa-v2/v3 form with log-bucketed distances
(`transformers` 4.57.6 `DisentangledSelfAttention`, `build_relative_position`,
`make_log_bucket_position`).

One table P of 2 * span relative-position embeddings of size d_model is shared by
all layers (Hugging Face `encoder.rel_embeddings`, optionally LayerNorm-ed:
`norm_rel_ebd="layer_norm"`, `encoder.LayerNorm`). Layer l projects it into keys
and queries of positions with its own linears (`pos_key_proj[l]`, `pos_query_proj[l]`,
d_model -> n_heads * head_dim, with bias):

    K^r_l = pos_key_proj[l](P),   Q^r_l = pos_query_proj[l](P)        (H, 2 span, dh) per head
    idx(i, j) = clamp(bucket(i - j) + span, 0, 2 span - 1)
    c2c_ij = q_i . k_j   (computed by the attention itself)
    c2p_ij = q_i . K^r_l[idx(i, j)]          (content -> position, "c2p")
    p2c_ij = k_j . Q^r_l[idx(i, j)]          (position -> content, "p2c")
    logits_ij = (c2c_ij + c2p_ij + p2c_ij) / sqrt(head_dim * (1 + number of position terms))

bucket(d) = d for |d| <= span / 2 and grows logarithmically beyond, up to
`max_relative_positions` (`make_log_bucket_position`; span = `position_buckets`).
With `position_buckets <= 0` there are no buckets: span = `max_relative_positions`
and idx clamps the raw distance. When max_relative_positions - 1 <= position_buckets / 2
(e.g. 256 buckets on a tiny model with 64 positions) the logarithmic part is
degenerate (Hugging Face divides by log of a number <= 1); every distance up to
span / 2 keeps its own bucket either way, and beyond it idx clamps the raw distance.
The Hugging Face index of p2c, -bucket(j - i), equals bucket(i - j) because the
bucketing is odd.

Scale: the bias hook returns scale * (c2p + p2c) with scale the one the attention
applies to c2c. DeBERTa divides all three terms by sqrt(head_dim * (1 + number of
position terms)), i.e. sqrt(3 * head_dim) with c2p and p2c, as Hugging Face does;
that is the default when `Config.attn_scale` is None (`default_attn_scale`).

Hugging Face's `share_att_key=True` (DeBERTa-v3) projects P with the attention's
own query/key linears instead of separate ones; a converter reproduces it by
copying the layer's query and key weights into `pos_query_proj[l]` and
`pos_key_proj[l]`. Parameters: `position_buckets` (256), `max_relative_positions`
(-1: Config.max_positions), `norm_rel_ebd` ("none" or "layer_norm"),
`pos_att_type` (a list of "c2p" and/or "p2c"). Any length (distances beyond the
buckets share the last ones).

Through FlexAttention (`score_mod`) the queries are scored against K^r_l and the keys against Q^r_l, (B, H, T,
2 span) each, and each pair's scores read at the row of its distance, from a (distances,) lookup of the buckets
(`pair_scores`), with the scale above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posformer.ops.flex import ScoreMod
from posformer.ops.linear import Linear
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

POS_ATT_TYPES = ("c2p", "p2c")
NORM_REL_EBD = ("none", "layer_norm")


def log_bucket_position(rel: Tensor, bucket_size: int, max_position: int) -> Tensor:
    """DeBERTa-v2's `make_log_bucket_position`: relative distances (any shape, long) -> buckets (long).

    |d| <= bucket_size // 2 stays d; beyond, sign(d) * (mid + ceil(log(|d| / mid) / log((max_position - 1)
    / mid) * (mid - 1))) with mid = bucket_size // 2.
    """
    sign = torch.sign(rel)
    mid = bucket_size // 2
    small = (rel < mid) & (rel > -mid)
    abs_pos = torch.where(small, torch.tensor(mid - 1).type_as(rel), rel.abs())
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, rel.type_as(log_pos), log_pos * sign).long()


@register("deberta")
class DeBERTa(PositionEncoding):
    """Disentangled content/position attention with a shared, log-bucketed relative table. Any length."""

    adds_bias = True
    pos_att_types: ClassVar[tuple[str, ...]] = POS_ATT_TYPES
    norm_rel_ebd_choices: ClassVar[tuple[str, ...]] = NORM_REL_EBD
    flex_form = "score_mod"

    defaults = {
        "position_buckets": 256,
        "max_relative_positions": -1,
        "norm_rel_ebd": "none",
        "pos_att_type": ["c2p", "p2c"],
    }
    cpu_bias_block_bytes = 16 * 2**20  # 16k forward 18.2 s a layer, 55.9 s at 4 MiB (docs/memory.md)

    @classmethod
    def default_attn_scale(cls, params: Mapping[str, Any], head_dim: int) -> float:
        """1 / sqrt(head_dim * (1 + number of position terms)): 1 / sqrt(3 head_dim) for c2p + p2c (`OwnAttnScale`)."""
        return 1.0 / math.sqrt(head_dim * (1 + len(params["pos_att_type"])))

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        for key in ("position_buckets", "max_relative_positions"):
            if not isinstance(params[key], int) or isinstance(params[key], bool):
                raise cls.param_error(cls.name, key, params[key], "an integer (<= 0: off / Config.max_positions)")
        if params["norm_rel_ebd"] not in NORM_REL_EBD:
            raise cls.param_error(cls.name, "norm_rel_ebd", params["norm_rel_ebd"], f"one of {NORM_REL_EBD}")
        kinds = params["pos_att_type"]
        if (
            not isinstance(kinds, (list, tuple))
            or not kinds
            or any(t not in POS_ATT_TYPES for t in kinds)
            or len(set(kinds)) != len(kinds)
        ):
            raise cls.param_error(cls.name, "pos_att_type", kinds, f"a non-empty list of distinct {POS_ATT_TYPES}")
        if params["position_buckets"] == 1:
            raise cls.param_error(cls.name, "position_buckets", 1, "<= 0 (no buckets) or an integer >= 2")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        max_rel = int(self.params["max_relative_positions"])
        self.max_relative_positions = max_rel if max_rel > 0 else sizes.max_positions
        self.position_buckets = int(self.params["position_buckets"])
        self.span = self.position_buckets if self.position_buckets > 0 else self.max_relative_positions
        self.kinds = tuple(self.params["pos_att_type"])
        self.rel_embeddings = nn.Embedding(2 * self.span, sizes.d_model)
        self.norm = (
            nn.LayerNorm(sizes.d_model, eps=sizes.norm_eps) if self.params["norm_rel_ebd"] == "layer_norm" else None
        )
        self.dropout = nn.Dropout(sizes.dropout)
        inner = sizes.n_heads * sizes.head_dim
        if "c2p" in self.kinds:
            self.pos_key_proj = nn.ModuleList(Linear(sizes.d_model, inner) for _ in range(n_layers))
        if "p2c" in self.kinds:
            self.pos_query_proj = nn.ModuleList(Linear(sizes.d_model, inner) for _ in range(n_layers))

    def index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | tuple[Tensor, Diagonal]:
        """The table row of each pair, idx(i, j) = clamp(bucket(i - j) + span, 0, 2 span - 1), (B or 1, Tq, Tk).
        When the positions count up by one: (the row of each distance low..high, (D,), a `Diagonal` over those
        rows) instead, so the pairs are a strided view, with no gather and no scatter in the backward (in a causal
        stack only the distances >= 0: a key after its query is masked). Under `torch.compile` always the pairs'
        rows, since choosing the view reads the positions on the host (a graph break). Computed once per
        forward."""
        return self.per_forward("index", q_pos, k_pos, self._index)

    def _index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | tuple[Tensor, Diagonal]:
        rel = relative_distance(q_pos, k_pos)
        if torch.compiler.is_compiling():
            return self._rows(rel)
        low, high = int(rel.min()), int(rel.max())
        pairs = pair_rows(q_pos, k_pos, rel, low)
        if not isinstance(pairs, Diagonal):
            return self._rows(rel)
        if self.causal and low < 0 <= high:  # i - j < 0 is a key after its query: masked, its row never read
            pairs, low = Diagonal(pairs.offset + low), 0
        return self._rows(torch.arange(low, high + 1, device=rel.device)), pairs

    def _rows(self, rel: Tensor) -> Tensor:
        if self.position_buckets > 0 and self.max_relative_positions - 1 > self.position_buckets // 2:
            rel = log_bucket_position(rel, self.position_buckets, self.max_relative_positions)
        return (rel + self.span).clamp(0, 2 * self.span - 1)

    def relative_embeddings(self) -> Tensor:
        """The shared table P, normalised if configured: (2 span, d_model)."""
        table = self.rel_embeddings.weight
        return self.dropout(self.norm(table) if self.norm is not None else table)

    def _heads(self, proj: nn.Linear, table: Tensor, rows: Tensor | None) -> Tensor:
        """(2 span, d_model) -> (H, 2 span, dh), or (H, D, dh): the rows `rows` (D,) of it."""
        heads = proj(table).unflatten(-1, (self.n_heads, self.head_dim)).transpose(0, 1)
        return heads if rows is None else heads[:, rows]

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """scale * (c2p + p2c): (B, H, Tq, Tk)."""
        index = self.index(q_pos, k_pos)
        rows, index = index if isinstance(index, tuple) else (None, index)
        table = self.relative_embeddings()
        terms = []  # the scale multiplies the (T, dh) operands, not the (T, T) scores
        if "c2p" in self.kinds:
            terms.append(
                query_position_scores(
                    q * self.scale, self._heads(self.pos_key_proj[layer], table, rows), index, k.shape[-2]
                )
            )
        if "p2c" in self.kinds:
            k = expand_heads(k, q.shape[1]) * self.scale
            terms.append(
                key_position_scores(k, self._heads(self.pos_query_proj[layer], table, rows), index, q.shape[-2])
            )
        return sum(terms[1:], terms[0])

    def score_mod(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> ScoreMod:
        """scale * (c2p + p2c) as FlexAttention's score_mod: q scored against K^r_l and k against Q^r_l, (B, H, T,
        2 span) each, read at the row idx(i, j) of each pair from a lookup of the distances that occur
        (`pair_scores.pair_score_mod`)."""
        low, rows = self.per_forward("flex_rows", q_pos, k_pos, self._flex_rows)
        table = self.relative_embeddings()
        queries = keys = None  # as `bias` computes them: the scale on the (T, dh) operands
        if "c2p" in self.kinds:
            queries = torch.matmul(q * self.scale, self._heads(self.pos_key_proj[layer], table, None).mT.to(q.dtype))
        if "p2c" in self.kinds:
            k = expand_heads(k, q.shape[1]) * self.scale
            keys = torch.matmul(k, self._heads(self.pos_query_proj[layer], table, None).mT.to(k.dtype))
        return pair_score_mod(q_pos, k_pos, low, rows, queries, keys)

    def _flex_rows(self, q_pos: Tensor, k_pos: Tensor) -> tuple[int, Tensor]:
        """(low, rows): the smallest distance i - j of a pair and the table row of each distance from it to the
        largest, (D,) long."""
        low, high = distance_span(q_pos, k_pos)
        return low, self._rows(torch.arange(low, high + 1, device=q_pos.device))
