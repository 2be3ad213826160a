"""Multi-head attention: `SelfAttention` and `CrossAttention` (MHA, GQA and MQA) over one kernel, `attend`
(`modules.attend`).

Shapes: B batch, T query length, S key length, H query heads, Hkv key/value
heads, dh head dim.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.modules.attend import attend
from posformer.modules.bias_blocks import BiasRows, ValuesTerm, attend_in_bias_blocks, bias_block_rows
from posformer.modules.cache import LayerCache, MemoryCache
from posformer.modules.key_smear import KeySmear, predecessor_real
from posformer.modules.norms import make_norm
from posformer.ops import causal_blocks
from posformer.ops.flex import ScoreMod
from posformer.ops.linear import Linear
from posformer.ops.masks import AttentionMask
from posformer.ops.packing import TokenPacking
from posformer.ops.weighted_attention import weighted_attention
from posformer.positions.base import PositionEncoding
from posformer.positions.forgetting import ReadsHidden
from posformer.positions.query_temperature import query_temperature
from posformer.positions.stick_breaking import ReplacesSoftmax


class Attention(nn.Module):
    """What self- and cross-attention share: head sizes, scale, dropout, the kernel and the output projection.

    Subclasses create their input projections first and then `out`, so that
    initialisation draws the weights in the same order whatever the subclass.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.q_dim, self.kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.scale = cfg.scale
        self.dropout = cfg.attention_dropout
        self.kernel = cfg.attn_impl
        self.qk_norm = cfg.qk_norm_over if cfg.qk_norm else None  # what QK-norm normalises: "head", "projection"
        self.sinks: nn.Parameter | None = None  # (H,) learned softmax sinks (Config.attention_sinks), self-attention

    def _output_projection(self, cfg: Config) -> Linear:
        return Linear(self.q_dim, cfg.d_model, bias=cfg.attn_out_bias)

    def _head_norms(self, cfg: Config) -> None:
        """`q_norm` and `k_norm` (Config.qk_norm; None without), after the projections, before `out`: over each
        head's head_dim features, or over the whole projection (Config.qk_norm_over="projection")."""
        per_head = self.qk_norm == "head"
        q_dim, kv_dim = (self.head_dim, self.head_dim) if per_head else (self.q_dim, self.kv_dim)
        self.q_norm = make_norm(cfg, q_dim) if self.qk_norm else None
        self.k_norm = make_norm(cfg, kv_dim) if self.qk_norm else None

    def _heads(self, x: Tensor, n_heads: int) -> Tensor:
        """(B, T, n * dh) -> (B, n, T, dh)."""
        return x.unflatten(-1, (n_heads, self.head_dim)).transpose(1, 2)

    def _normed_heads(self, x: Tensor, n_heads: int, norm: nn.Module | None) -> Tensor:
        """A query or key projection (B, T, n * dh) -> (B, n, T, dh) through its QK-norm `norm`, if any: over the
        whole projection before the split, or over each head after it."""
        if norm is not None and self.qk_norm == "projection":
            x = norm(x)
        x = self._heads(x, n_heads)
        return norm(x) if norm is not None and self.qk_norm == "head" else x

    @staticmethod
    def _unpacked(x: Tensor, packing: TokenPacking | None) -> Tensor:
        """A projection of packed tokens (N, n) back to the batch layout (B, T, n); unpacked x passes."""
        return x if packing is None else packing.unpack(x)

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: AttentionMask,
        need_weights: bool,
        values: ValuesTerm | None = None,
        packing: TokenPacking | None = None,
        score_mod: ScoreMod | None = None,
        bias_rows: BiasRows | None = None,
        cpu_block_bytes: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """The kernel (eager when the probabilities are asked for), then the output projection: (B, T, d_model),
        or (N, d_model) for the real tokens of a `packing`, and the probabilities asked for.

        bias_rows: the position bias, asked for by rows of queries; a bias too large to hold whole
        (`bias_blocks.bias_block_rows`; cpu_block_bytes: the encoding's size of a block on the CPU) is used one block
        of queries at a time."""
        dropout = self.dropout if self.training else 0.0
        batch, heads, length = q.shape[:3]
        rows = (
            None
            if need_weights or bias_rows is None
            else bias_block_rows(batch, heads, length, k.shape[-2], q.device, cpu_block_bytes)
        )
        if rows is not None:
            out = attend_in_bias_blocks(q, k, v, mask, bias_rows, self.scale, dropout, values, rows, self.sinks)
            out, probs = mask.zero_dropped_queries(out), None
        else:
            bias = None if bias_rows is None else bias_rows(0, length, k.shape[-2])
            kernel = "eager" if need_weights else self.kernel
            out, probs = attend(q, k, v, mask, bias, self.scale, dropout, kernel, values, score_mod, self.sinks)
        return self._project(out, packing), probs

    def _project(self, out: Tensor, packing: TokenPacking | None) -> Tensor:
        """The heads' outputs (B, H, T, dh) through the output projection: (B, T, d_model), or (N, d_model) for the
        real tokens of a `packing`."""
        out = out.transpose(1, 2)  # (B, T, H, dh)
        return self.out(out.flatten(2) if packing is None else packing.pack(out).flatten(1))


class SelfAttention(Attention):
    """Self-attention with the position hooks of its stack's encoding, at its layer index, and any query
    temperature (`Config.query_temperature`) after them; with `Config.key_smear`, each key mixed with its
    predecessor's before them (`modules.key_smear`). An encoding that reads the hidden states
    (`positions.forgetting.ReadsHidden`) gets x, and its bias comes from its token terms.

    One fused `qkv` projection. The encoding is held, not registered: the stack
    owns it (one copy in `state_dict`, `parameters()` and `.to()`).
    """

    def __init__(self, cfg: Config, position: PositionEncoding, layer: int) -> None:
        super().__init__(cfg)
        self.qkv = Linear(cfg.d_model, self.q_dim + 2 * self.kv_dim, bias=cfg.qkv_bias)
        if cfg.attention_sinks:  # GPT-OSS: one learned logit per head in the softmax's denominator
            self.sinks = nn.Parameter(torch.randn(self.n_heads) * cfg.init_std)
        self._head_norms(cfg)
        self.out = self._output_projection(cfg)
        self.key_smear = KeySmear(self.n_kv_heads) if cfg.key_smear else None
        object.__setattr__(self, "position", position)
        self.layer = layer
        self.temperature = cfg.query_temperature

    def forward(
        self,
        x: Tensor,
        mask: AttentionMask,
        pos: Tensor,
        cache: LayerCache | None = None,
        need_weights: bool = False,
        packing: TokenPacking | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, T, d_model) at positions pos: (B, T), after the `cache`d keys (mask covers both);
        with a `packing`, x holds its real tokens only: (N, d_model).

        Returns the output, shaped as x, and, with `need_weights`, the probabilities (B, H, T, S).
        """
        q, k, v = self._unpacked(self.qkv(x), packing).split((self.q_dim, self.kv_dim, self.kv_dim), dim=-1)
        q, k = self._normed_heads(q, self.n_heads, self.q_norm), self._normed_heads(k, self.n_kv_heads, self.k_norm)
        v = self._heads(v, self.n_kv_heads)
        if self.key_smear is not None:
            k = self._smeared(k, mask, cache)
        q, k = self.position.rotate(q, k, pos, pos, self.layer)
        if self.temperature is not None:
            q = (q * query_temperature(pos, **self.temperature)).to(q.dtype)
        reads_hidden = isinstance(self.position, ReadsHidden)
        q_terms, k_terms = self._hidden_terms(x, packing) if reads_hidden else (None, None)
        k_pos = pos
        if cache is not None:
            k, v, k_pos = cache.append(k, v, pos, k_terms)
            k_terms = cache.terms
        if isinstance(self.position, ReplacesSoftmax):
            return self._weighted(q, k, v, mask, need_weights, packing)
        values = partial(self._values, q_pos=pos, k_pos=k_pos) if self.position.uses_values else None
        offset = k.shape[2] - q.shape[2]  # the index of the first query among the keys
        if self.kernel == "flex" and not need_weights:
            if reads_hidden:
                q_index = torch.arange(offset, k.shape[2], device=q.device)
                score_mod = self.position.terms_score_mod(q_terms, k_terms, q_index, self.layer)
            else:
                score_mod = self.position.score_mod(q, k, pos, k_pos, self.layer)
            return self._attend(q, k, v, mask, need_weights, values, packing, score_mod=score_mod)
        if reads_hidden:
            bias_rows = partial(self._terms_rows, q, k, q_terms, k_terms, offset)
        else:
            bias_rows = partial(self._bias_rows, q, k, pos, k_pos) if self.position.uses_bias else None
        return self._attend(
            q, k, v, mask, need_weights, values, packing, bias_rows=bias_rows,
            cpu_block_bytes=self.position.cpu_bias_block_bytes,
        )  # fmt: skip

    def _weighted(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, need_weights: bool, packing: TokenPacking | None
    ) -> tuple[Tensor, Tensor | None]:
        """Attention with the weights of an encoding that replaces the softmax (`ReplacesSoftmax`)."""
        batch, heads, length = q.shape[:3]
        rows = bias_block_rows(batch, heads, length, k.shape[-2], q.device)
        recompute = rows is not None  # blocks for memory: recomputed in the backward
        if mask.is_causal and q.device.type == "cpu" and length > causal_blocks.BLOCK_ROWS:  # blocks for speed
            rows = min(rows or length, causal_blocks.BLOCK_ROWS)
        weigh = partial(self.position.key_weights, layer=self.layer)
        dropout = self.dropout if self.training else 0.0
        out, weights = weighted_attention(q, k, v, mask, self.scale, weigh, rows, need_weights, dropout, recompute)
        return self._project(out, packing), weights

    def _smeared(self, k: Tensor, mask: AttentionMask, cache: LayerCache | None) -> Tensor:
        """k (B, Hkv, T, dh) mixed with each predecessor's key: the cache's last key before the first; the cache
        then keeps this call's last."""
        keep, documents = (None, None) if mask.rule is None else (mask.rule.key_keep, mask.rule.documents)
        predecessors = predecessor_real(keep, k.shape[2], documents)
        smeared = self.key_smear(k, None if cache is None else cache.last_key, predecessors)
        if cache is not None:
            cache.last_key = k[:, :, -1:].clone()  # a view would keep the whole projection of a long prefix
        return smeared

    def _hidden_terms(self, x: Tensor, packing: TokenPacking | None) -> tuple[Tensor | None, Tensor]:
        """The encoding's query and key terms (B, H, T, d) of x (`ReadsHidden`), packed tokens unpacked first."""
        return self.position.token_terms(x if packing is None else packing.unpack(x), self.layer)

    def _terms_rows(
        self,
        q: Tensor,
        k: Tensor,
        q_terms: Tensor | None,
        k_terms: Tensor,
        offset: int,
        start: int,
        end: int,
        keys: int,
    ) -> Tensor:
        """The bias of queries [start, end) over the first `keys` keys, from the hidden-state terms (`ReadsHidden`)
        and the queries and keys themselves; offset: the index of the first query among the keys."""
        q_index = torch.arange(offset + start, offset + end, device=k_terms.device)
        q_rows = None if q_terms is None else q_terms[:, :, start:end]
        pair = (q[:, :, start:end], k[:, :, :keys])
        return self.position.terms_bias(q_rows, k_terms[:, :, :keys], q_index, self.layer, *pair)

    def _bias_rows(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, start: int, end: int, keys: int
    ) -> Tensor | None:
        """The encoding's bias of queries [start, end) over the first `keys` keys; the whole bias from the very
        tensors every layer gets, so that a bias computed once per forward is shared (`per_forward`)."""
        if (start, end, keys) != (0, q.shape[-2], k.shape[-2]):
            q, k, q_pos, k_pos = q[:, :, start:end], k[:, :, :keys], q_pos[:, start:end], k_pos[:, :keys]
        return self.position.bias(q, k, q_pos, k_pos, self.layer)

    def _values(self, probs: Tensor, rows: slice, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The encoding's `values` term for the queries `rows` over the first probs.shape[-1] keys."""
        return self.position.values(probs, q_pos[:, rows], k_pos[:, : probs.shape[-1]], self.layer)

    def extra_repr(self) -> str:
        return f"position={self.position.name}, layer={self.layer}"


class CrossAttention(Attention):
    """Attention from the decoder to the encoder output, without position hooks.

    q from x (`q`), k and v from the memory (fused `kv`), computed once per
    generation when a `MemoryCache` is given.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.q = Linear(cfg.d_model, self.q_dim, bias=cfg.qkv_bias)
        self.kv = Linear(cfg.d_model, 2 * self.kv_dim, bias=cfg.qkv_bias)
        self._head_norms(cfg)
        self.out = self._output_projection(cfg)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        mask: AttentionMask,
        cache: MemoryCache | None = None,
        need_weights: bool = False,
        packing: TokenPacking | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, T, d_model), or its real tokens (N, d_model) with a `packing`; memory: (B, S, d_model).

        Returns the output, shaped as x, and the probabilities (B, H, T, S).
        """
        q = self._normed_heads(self._unpacked(self.q(x), packing), self.n_heads, self.q_norm)
        if cache is not None and cache.k is not None:
            k, v = cache.k, cache.v
        else:
            k, v = self.kv(memory).split((self.kv_dim, self.kv_dim), dim=-1)
            k, v = self._normed_heads(k, self.n_kv_heads, self.k_norm), self._heads(v, self.n_kv_heads)
            if cache is not None:
                cache.set(k, v)
        return self._attend(q, k, v, mask, need_weights, packing=packing)
