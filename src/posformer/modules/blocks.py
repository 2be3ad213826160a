"""`Block`: self-attention, optional cross-attention and a feed-forward network (dense, or a mixture of
experts), each a residual sub-layer whose norm is placed post, pre, sandwich or on the output."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.config.linear_attention import GATED_DELTANET
from posformer.modules.attention import CrossAttention, SelfAttention
from posformer.modules.cache import LayerCache, MemoryCache
from posformer.modules.feedforward import FeedForward
from posformer.modules.gated_deltanet import GatedDeltaNet
from posformer.modules.latent_attention import LatentAttention
from posformer.modules.moe import MoEFeedForward
from posformer.modules.norms import make_norm
from posformer.modules.per_layer_inputs import PerLayerInputGate
from posformer.modules.shared_kv import KVShare
from posformer.ops.masks import AttentionMask, KeyReach
from posformer.ops.packing import TokenPacking
from posformer.positions.contract import PositionEncoding


class Residual(nn.Module):
    """One residual sub-layer around f, with its norm(s).

    pre:      x + f(norm(x))
    post:     norm(alpha * x + f(x))          (alpha = 1, or DeepNorm's alpha)
    sandwich: x + post_norm(f(norm(x)))       (Ding et al. 2021, CogView)
    output:   x + norm(f(x))                  (Olmo 2 and 3, EXAONE 4: no norm before f)
    """

    def __init__(self, cfg: Config, alpha: float = 1.0) -> None:
        super().__init__()
        self.placement = cfg.norm_placement
        self.alpha = alpha
        self.norm = make_norm(cfg)
        self.post_norm = make_norm(cfg) if self.placement == "sandwich" else None
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
        if self.placement == "post":
            return self.norm(self.alpha * x + self.dropout(f(x)))
        if self.placement == "output":
            return x + self.dropout(self.norm(f(x)))
        h = f(self.norm(x))
        if self.post_norm is not None:
            h = self.post_norm(h)
        return x + self.dropout(h)


class Block(nn.Module):
    """One Transformer layer. x: (B, T, d_model) -> (B, T, d_model).

    Sequential: x = x + attn(...); x = x + ffn(...) (with the norms `Residual` places).
    Parallel (`Config.parallel_residual`): x + attn(norm1(x)) + ffn(norm2(x)).
    The stack hands the block its layer's config, position encoding and index once, here, and whether its
    feed-forward is a mixture of experts (`experts`; None: whether `Config.n_experts` is set). A layer of
    `Config.mixer` "gated_deltanet" mixes its tokens by `GatedDeltaNet` instead of self-attention (`attn`), and has
    no position encoding (None). `kv_share`: its self-attention's part in KV sharing (`Config.kv_sources`).
    After the sub-layers, a block with `Config.per_layer_inputs` mixes in its layer's per-layer input
    (`per_layer_input`), and one with `Config.layer_scalars` multiplies its output by its `layer_scalar`.
    """

    def __init__(
        self,
        cfg: Config,
        position: PositionEncoding | None,
        layer: int,
        cross: bool = False,
        alpha: float = 1.0,
        experts: bool | None = None,
        kv_share: KVShare | None = None,
    ) -> None:
        super().__init__()
        self.attn_res = Residual(cfg, alpha)
        latent = cfg.latent_attention is not None  # multi-head latent attention (MLA)
        if cfg.mixer == GATED_DELTANET:
            self.attn = GatedDeltaNet(cfg)
        elif latent:
            self.attn = LatentAttention(cfg, position, layer)
        else:
            self.attn = SelfAttention(cfg, position, layer, kv_share)
        self.cross_res = Residual(cfg, alpha) if cross else None
        self.cross_attn = CrossAttention(cfg) if cross else None
        self.ffn_res = Residual(cfg, alpha)
        self.has_experts = cfg.n_experts is not None if experts is None else experts
        self.ffn = MoEFeedForward(cfg) if self.has_experts else FeedForward(cfg)
        self.parallel = cfg.parallel_residual
        self.reach = KeyReach(cfg.sliding_window, cfg.attention_chunk)  # its self-attention's window and chunk
        self.per_layer_input = PerLayerInputGate(cfg) if cfg.per_layer_inputs is not None else None
        self.register_buffer("layer_scalar", torch.ones(1) if cfg.layer_scalars else None)

    def forward(
        self,
        x: Tensor,
        mask: AttentionMask,
        pos: Tensor,
        cache: LayerCache | None = None,
        memory: Tensor | None = None,
        memory_mask: AttentionMask | None = None,
        memory_cache: MemoryCache | None = None,
        need_weights: bool = False,
        packing: TokenPacking | None = None,
        router_logits: list[Tensor] | None = None,
        per_layer_input: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        """x: (B, T, d_model) at positions pos (B, T), or with a `packing` its real tokens (N, d_model);
        memory: (B, S, d_model), the encoder output. A mixture-of-experts feed-forward appends its router's
        logits (B * T or N, n_experts) to `router_logits` when given. per_layer_input: (B, T, P), this layer's
        (`Config.per_layer_inputs`).

        Returns the new hidden states and the attention weights asked for (self, then cross).
        """
        weights: list[Tensor] = []

        def self_attention(h: Tensor) -> Tensor:
            out, probs = self.attn(h, mask, pos, cache, need_weights, packing)
            weights.extend([] if probs is None else [probs])
            return out

        def cross_attention(h: Tensor) -> Tensor:
            out, probs = self.cross_attn(h, memory, memory_mask, memory_cache, need_weights, packing)
            weights.extend([] if probs is None else [probs])
            return out

        def feed_forward(h: Tensor) -> Tensor:
            return self.ffn(h, router_logits) if self.has_experts else self.ffn(h)

        if self.parallel:
            ffn_out = self.ffn_res.dropout(feed_forward(self.ffn_res.norm(x)))
            x = self.attn_res(x, self_attention) + ffn_out
        else:
            x = self.attn_res(x, self_attention)
            if self.cross_attn is not None:
                x = self.cross_res(x, cross_attention)
            x = self.ffn_res(x, feed_forward)
        if self.per_layer_input is not None:
            x = self.per_layer_input(x, per_layer_input)
        if self.layer_scalar is not None:
            x = x * self.layer_scalar
        return x, weights
