"""Multi-head attention for self- and cross-attention: MHA, GQA and MQA, SDPA and eager paths.

Shapes: B batch, T query length, S key length, H query heads, Hkv key/value
heads, dh head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer.cache import LayerCache
from posformer.config import Config
from posformer.masks import AttentionMask
from posformer.positions.base import PositionEncoding


class Attention(nn.Module):
    """Attention with the position hooks applied where the contract places them.

    Self-attention projects q, k, v with one fused `qkv` linear; cross-attention
    projects q from x and k, v (fused `kv`) from the encoder memory. Position
    hooks act in self-attention only.
    """

    def __init__(self, cfg: Config, cross: bool = False) -> None:
        super().__init__()
        self.cross = cross
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.scale = cfg.scale
        self.dropout = cfg.attention_dropout
        self.eager = cfg.attn_impl == "eager"
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        if cross:
            self.q = nn.Linear(cfg.d_model, q_dim, bias=cfg.qkv_bias)
            self.kv = nn.Linear(cfg.d_model, 2 * kv_dim, bias=cfg.qkv_bias)
        else:
            self.qkv = nn.Linear(cfg.d_model, q_dim + 2 * kv_dim, bias=cfg.qkv_bias)
        self.out = nn.Linear(q_dim, cfg.d_model, bias=cfg.attn_out_bias)

    def _heads(self, x: Tensor, n_heads: int) -> Tensor:
        """(B, T, n*dh) -> (B, n, T, dh)."""
        return x.unflatten(-1, (n_heads, self.head_dim)).transpose(1, 2)

    def project(self, x: Tensor, memory: Tensor | None, cache: LayerCache | None) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, T, dh) and this call's new k, v (B, Hkv, T or S, dh)."""
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        if not self.cross:
            q, k, v = self.qkv(x).split((q_dim, kv_dim, kv_dim), dim=-1)
            return self._heads(q, self.n_heads), self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)
        q = self._heads(self.q(x), self.n_heads)
        if cache is not None and cache.k is not None:
            return q, cache.k, cache.v
        k, v = self.kv(memory).split((kv_dim, kv_dim), dim=-1)
        return q, self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)

    def forward(
        self,
        x: Tensor,
        mask: AttentionMask,
        q_pos: Tensor,
        position: PositionEncoding | None = None,
        layer: int = 0,
        cache: LayerCache | None = None,
        memory: Tensor | None = None,
        memory_pos: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, T, d_model), q_pos: (B, T); memory: (B, S, d_model) for cross-attention.

        Returns the output (B, T, d_model) and, with `need_weights`, the
        attention probabilities (B, H, T, S).
        """
        q, k, v = self.project(x, memory, cache)
        if self.cross:
            k_pos = memory_pos
            if cache is not None and cache.k is None:
                cache.set(k, v, k_pos)
            bias = None
        else:
            q, k = position.rotate(q, k, q_pos, q_pos, layer)
            k_pos = q_pos
            if cache is not None:
                k, v, k_pos = cache.append(k, v, q_pos)
            bias = position.bias(q, k, q_pos, k_pos, layer)
        use_eager = self.eager or need_weights or (not self.cross and position.uses_values)
        if use_eager:
            out, probs = self._eager(q, k, v, mask, bias, q_pos, k_pos, position, layer)
        else:
            out, probs = self._sdpa(q, k, v, mask, bias), None
        if mask.query_keep is not None:
            out = out * mask.query_keep[:, None, :, None].to(out.dtype)
        return self.out(out.transpose(1, 2).flatten(2)), probs

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, bias: Tensor | None) -> Tensor:
        is_causal = mask.is_causal and bias is None
        additive = mask.additive if bias is None else _combine(bias, mask, q, k)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=additive, is_causal=is_causal, scale=self.scale,
            dropout_p=self.dropout if self.training else 0.0, enable_gqa=self.n_kv_heads != self.n_heads,
        )

    def _eager(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, bias: Tensor | None,
        q_pos: Tensor, k_pos: Tensor, position: PositionEncoding | None, layer: int,
    ) -> tuple[Tensor, Tensor]:
        if self.n_kv_heads != self.n_heads:
            repeat = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # (B, H, T, S)
        additive = _combine(bias, mask, q, k)
        if additive is not None:
            scores = scores + additive
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        if mask.query_keep is not None:
            probs = probs * mask.query_keep[:, None, :, None].to(probs.dtype)
        dropped = F.dropout(probs, self.dropout, self.training)
        out = torch.matmul(dropped, v)
        if position is not None and not self.cross:
            extra = position.values(dropped, q_pos, k_pos, layer)
            if extra is not None:
                out = out + extra
        return out, probs


def _combine(bias: Tensor | None, mask: AttentionMask, q: Tensor, k: Tensor) -> Tensor | None:
    """bias (B or 1, H, T, S) plus the materialised mask, in q's dtype."""
    additive = mask.materialized(q.shape[2], k.shape[2], q.dtype, q.device)
    if bias is None:
        return additive
    bias = bias.to(q.dtype)
    if additive is None:
        return bias
    return torch.where(additive < 0, additive, bias)
