"""Multi-head attention: `SelfAttention` and `CrossAttention` (MHA, GQA and MQA) over one kernel, `attend`
(`modules.attend`).

Shapes: B batch, T query length, S key length, H query heads, Hkv key/value
heads, dh head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posformer import positions
from posformer.config import Config
from posformer.modules.attend import attend
from posformer.modules.bias_blocks import BiasRows, ValuesTerm, attend_in_bias_blocks, bias_block_rows
from posformer.modules.cache import LayerCache, MemoryCache
from posformer.modules.key_smear import KeySmear, predecessor_real
from posformer.modules.norms import L2Norm, make_qk_norm
from posformer.modules.position_attention import Heads, strategy_for
from posformer.modules.shared_kv import KVShare
from posformer.ops.flex import ScoreMod
from posformer.ops.linear import Linear
from posformer.ops.masks import AttentionMask
from posformer.ops.packing import TokenPacking
from posformer.positions.contract import PositionEncoding


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
        head's head_dim features, or over the whole projection (Config.qk_norm_over="projection"); the config's
        norm, or Llama 4's weightless L2 norm (Config.qk_norm_kind="l2")."""
        per_head = self.qk_norm == "head"
        q_dim, kv_dim = (self.head_dim, self.head_dim) if per_head else (self.q_dim, self.kv_dim)
        self.q_norm = make_qk_norm(cfg, q_dim) if self.qk_norm else None
        self.k_norm = make_qk_norm(cfg, kv_dim) if self.qk_norm else None

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

    def run_kernel(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: AttentionMask,
        need_weights: bool,
        values: ValuesTerm | None = None,
        score_mod: ScoreMod | None = None,
        bias_rows: BiasRows | None = None,
        block_bytes: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """The kernel over q (B, H, T, dh), k and v (B, Hkv, S, dh) (eager when the probabilities are asked for): the
        heads' outputs (B, H, T, dh) and the probabilities asked for (B, H, T, S).

        bias_rows: the position bias, asked for by rows of queries; a bias too large to hold whole
        (`bias_blocks.bias_block_rows`; block_bytes: the encoding's size of a block on the CPU) is used one block
        of queries at a time."""
        dropout = self.dropout if self.training else 0.0
        batch, n_heads, length = q.shape[:3]
        rows = (
            None
            if need_weights or bias_rows is None
            else bias_block_rows(batch, n_heads, length, k.shape[-2], q.device, block_bytes)
        )
        if rows is not None:
            out = attend_in_bias_blocks(q, k, v, mask, bias_rows, self.scale, dropout, values, rows, self.sinks)
            return mask.zero_dropped_queries(out), None
        bias = None if bias_rows is None else bias_rows(0, length, k.shape[-2])
        kernel = "eager" if need_weights else self.kernel
        return attend(q, k, v, mask, bias, self.scale, dropout, kernel, values, score_mod, self.sinks)

    def _project(self, out: Tensor, packing: TokenPacking | None) -> Tensor:
        """The heads' outputs (B, H, T, dh) through the output projection: (B, T, d_model), or (N, d_model) for the
        real tokens of a `packing`."""
        out = out.transpose(1, 2)  # (B, T, H, dh)
        return self.out(out.flatten(2) if packing is None else packing.pack(out).flatten(1))


class SelfAttention(Attention):
    """Self-attention with the position hooks of its stack's encoding, at its layer index, and any query
    temperature (`Config.query_temperature`) after them; with `Config.key_smear`, each key mixed with its
    predecessor's before them (`modules.key_smear`). The attention the encoding declares
    (`PositionEncoding.attention`) is one strategy, chosen when the layer is built (`position_attention`).

    One fused `qkv` projection. The encoding is held, not registered: the stack
    owns it (one copy in `state_dict`, `parameters()` and `.to()`).

    `kv_share` (`Config.kv_sources`, `modules.shared_kv`): a layer that reads an earlier layer's keys and values has
    no key or value rows in `qkv`, no `k_norm`, and rotates its queries alone; a source lends its own. With
    `Config.values_from_keys` `qkv` has no value rows: the values are the key rows' output.
    """

    def __init__(self, cfg: Config, position: PositionEncoding, layer: int, kv_share: KVShare | None = None) -> None:
        super().__init__(cfg)
        self.kv_share = kv_share
        self.reads_shared = kv_share is not None and kv_share.reads
        self.values_from_keys = cfg.values_from_keys
        k_rows = 0 if self.reads_shared else self.kv_dim
        v_rows = 0 if self.reads_shared or cfg.values_from_keys else self.kv_dim
        # the rows of q, k and v, and with Config.attention_output_gate those of each head's output gate
        self.qkv_sizes = (self.q_dim, k_rows, v_rows) + ((self.q_dim,) if cfg.attention_output_gate else ())
        self.qkv = Linear(cfg.d_model, sum(self.qkv_sizes), bias=cfg.qkv_bias)
        if cfg.attention_sinks:  # GPT-OSS: one learned logit per head in the softmax's denominator
            self.sinks = nn.Parameter(torch.randn(self.n_heads) * cfg.init_std)
        self._head_norms(cfg)
        if self.reads_shared:
            self.k_norm = None
        self.v_norm = L2Norm(cfg.norm_eps) if cfg.value_norm and not self.reads_shared else None
        self.out = self._output_projection(cfg)
        self.key_smear = KeySmear(self.n_kv_heads) if cfg.key_smear else None
        object.__setattr__(self, "position", position)
        self.layer = layer
        self.strategy = strategy_for(position, layer)
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
        """x: (B, T, d_model) at positions pos: (B, T), or (3, B, T) with axes (M-RoPE), after the `cache`d keys
        (mask covers both);
        with a `packing`, x holds its real tokens only: (N, d_model).

        Returns the output, shaped as x, and, with `need_weights`, the probabilities (B, H, T, S).
        """
        q, k, v, *gate = self._unpacked(self.qkv(x), packing).split(self.qkv_sizes, dim=-1)
        q = self._normed_heads(q, self.n_heads, self.q_norm)  # (B, H, T, dh)
        if self.reads_shared:  # the queries alone: the keys come rotated from their source
            q = self.position.rotate(q, q[:, :0], pos, pos, self.layer)[0]
        else:
            k, v = self._own_keys_and_values(k, v, mask, cache)  # (B, Hkv, T, dh)
            q, k = self.position.rotate(q, k, pos, pos, self.layer)
        pos = positions.token_positions(pos)  # (B, T): ids with axes (M-RoPE) have served the rotation
        if self.temperature is not None:
            q = (q * positions.query_temperature(pos, **self.temperature)).to(q.dtype)
        q_terms, k_terms = self.strategy.token_terms(x, packing)
        k_pos = pos
        if self.reads_shared:
            k, v, k_pos = self.kv_share.store.read(self.kv_share.source)  # (B, Hkv, S, dh), cached keys included
        elif cache is not None:
            k, v, k_pos = cache.append(k, v, pos, k_terms)  # k, v: (B, Hkv, S, dh), the cached keys first
            k_terms = cache.terms
        if self.kv_share is not None and self.kv_share.lends:
            self.kv_share.store.lend(self.kv_share.layer, k, v, k_pos)
        out, probs = self.strategy(self, Heads(q, k, v, pos, k_pos, q_terms, k_terms), mask, need_weights)
        if gate:  # Config.attention_output_gate: each head's output (B, H, T, dh) times sigmoid of its gate
            out = out * torch.sigmoid(self._heads(gate[0], self.n_heads))
        return self._project(out, packing), probs

    def _own_keys_and_values(
        self, k: Tensor, v: Tensor, mask: AttentionMask, cache: LayerCache | None
    ) -> tuple[Tensor, Tensor]:
        """The layer's keys and values (B, Hkv, T, dh) from its projections k, v (B, T, Hkv * dh) (v empty with
        `Config.values_from_keys`: the values are k as projected): QK-norm and any smear on the keys,
        `Config.value_norm` on the values."""
        v = self._heads(k if self.values_from_keys else v, self.n_kv_heads)
        if self.v_norm is not None:
            v = self.v_norm(v)
        k = self._normed_heads(k, self.n_kv_heads, self.k_norm)
        if self.key_smear is not None:
            k = self._smeared(k, mask, cache)
        return k, v

    def _smeared(self, k: Tensor, mask: AttentionMask, cache: LayerCache | None) -> Tensor:
        """k (B, Hkv, T, dh) mixed with each predecessor's key: the cache's last key before the first; the cache
        then keeps this call's last."""
        keep, documents = (None, None) if mask.rule is None else (mask.rule.key_keep, mask.rule.documents)
        predecessors = predecessor_real(keep, k.shape[2], documents)
        smeared = self.key_smear(k, None if cache is None else cache.last_key, predecessors)
        if cache is not None:
            cache.last_key = k[:, :, -1:].clone()  # a view would keep the whole projection of a long prefix
        return smeared

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
        out, probs = self.run_kernel(q, k, v, mask, need_weights)
        return self._project(out, packing), probs
