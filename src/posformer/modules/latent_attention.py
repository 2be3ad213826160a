"""`LatentAttention`: multi-head latent attention (MLA, DeepSeek-V2 and V3) with decoupled RoPE and a compressed
KV cache, chosen by `Config.latent_attention` (`posformer.config.latent`).

Shapes: B batch, T query length, S key length, H heads, n nope_dim, r rope width (`Config.d_head`), v v_dim,
c kv_lora_rank.

Queries: x -> q (H * (n + r)), or x -> q_down -> RMSNorm -> q_up with q_lora_rank; each head is its nope part
(n) then its rope part (r). Keys and values: x -> kv_down -> (c_kv (c), k_rope (r)); c_kv -> RMSNorm -> kv_up ->
per head (k_nope (n), v (v)). The rope part of the key is one head that every head shares (decoupled RoPE):
the position encoding rotates q's rope parts (B, H, T, r) and that one key (B, 1, T, r), so it sees heads of
`d_head` = r features and must act by `rotate` alone (`config.latent.LATENT_POSITIONS`). A head's score is
scale * (q_nope . k_nope + q_rope . k_rope), scale (n + r) ** -0.5 unless `Config.attn_scale` says otherwise.
The latents' RMSNorms have DeepSeek's eps, 1e-6, whatever `Config.norm_eps`. `Config.qkv_bias` gives a bias to
the projections from x to the latents (q_down, kv_down; DeepSeek's attention_bias), and the single q projection,
q_up and kv_up have none; `Config.attn_out_bias` to `out`.

The KV cache (`modules.cache.LayerCache`) keeps per token only the normalised latent c_kv, as its values
(B, 1, S, c), and the rotated shared rope key, as its keys (B, 1, S, r): c + r numbers per token and layer, not
H * (n + r + v). Two forms compute the same attention:
  expanded  (no cache, or an empty one: a training forward, a prefill) kv_up makes every head's key
            (k_nope, k_rope) and value from this call's latents: MHA with heads of n + r and values of v.
  absorbed  (a cache that holds earlier tokens: decoding) kv_up is never applied to the cached latents: its key
            part W_uk (H, n, c) is folded into the query, q_nope . (W_uk c) = (W_uk^T q_nope) . c, and its value
            part W_uv (H, v, c) into the output, W_uv (sum_j p_j c_j): MQA over one head whose key is
            (c_kv, k_rope) (c + r) and whose value is c_kv (c), DeepSeek's "weight absorption".
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posformer import positions
from posformer.config import Config
from posformer.modules.attend import attend
from posformer.modules.cache import LayerCache
from posformer.modules.norms import RMSNorm
from posformer.ops.linear import Linear
from posformer.ops.masks import AttentionMask
from posformer.ops.packing import TokenPacking
from posformer.positions.contract import PositionEncoding

LATENT_NORM_EPS = 1e-6  # DeepSeek's q_a_layernorm and kv_a_layernorm


class LatentAttention(nn.Module):
    """Self-attention through a low-rank latent (see the module docstring), with the position hooks of its stack's
    encoding at its layer index. The encoding is held, not registered: the stack owns it."""

    def __init__(self, cfg: Config, position: PositionEncoding, layer: int) -> None:
        super().__init__()
        latent = cfg.latent_attention
        self.n_heads, self.rope_dim = cfg.n_heads, cfg.head_dim
        self.nope_dim, self.v_dim, self.kv_rank = latent["nope_dim"], latent["v_dim"], latent["kv_lora_rank"]
        q_out = self.n_heads * (self.nope_dim + self.rope_dim)
        q_rank = latent["q_lora_rank"]
        if q_rank is None:
            self.q = Linear(cfg.d_model, q_out, bias=False)
            self.q_down = self.q_norm = self.q_up = None
        else:
            self.q = None
            self.q_down = Linear(cfg.d_model, q_rank, bias=cfg.qkv_bias)
            self.q_norm = RMSNorm(q_rank, LATENT_NORM_EPS)
            self.q_up = Linear(q_rank, q_out, bias=False)
        self.kv_down = Linear(cfg.d_model, self.kv_rank + self.rope_dim, bias=cfg.qkv_bias)
        self.kv_norm = RMSNorm(self.kv_rank, LATENT_NORM_EPS)
        self.kv_up = Linear(self.kv_rank, self.n_heads * (self.nope_dim + self.v_dim), bias=False)
        self.out = Linear(self.n_heads * self.v_dim, cfg.d_model, bias=cfg.attn_out_bias)
        self.scale = cfg.scale
        self.dropout = cfg.attention_dropout
        self.kernel = cfg.attn_impl
        object.__setattr__(self, "position", position)
        self.layer = layer

    def forward(
        self,
        x: Tensor,
        mask: AttentionMask,
        pos: Tensor,
        cache: LayerCache | None = None,
        need_weights: bool = False,
        packing: TokenPacking | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, T, d_model) at positions pos: (B, T), after the `cache`d tokens (mask covers both); with a
        `packing`, x holds its real tokens only: (N, d_model).

        Returns the output, shaped as x, and, with `need_weights`, the probabilities (B, H, T, S).
        """
        q = self._heads(self._unpacked(self._query(x), packing), self.nope_dim + self.rope_dim)
        q_nope, q_rope = q.split((self.nope_dim, self.rope_dim), dim=-1)  # (B, H, T, n), (B, H, T, r)
        latent, k_rope = self._unpacked(self.kv_down(x), packing).split((self.kv_rank, self.rope_dim), dim=-1)
        latent = self.kv_norm(latent).unsqueeze(1)  # (B, 1, T, c)
        q_rope, k_rope = self.position.rotate(q_rope, k_rope.unsqueeze(1), pos, pos, self.layer)  # k: (B, 1, T, r)
        absorbed = cache is not None and len(cache) > 0
        if cache is not None:
            k_rope, latent, _ = cache.append(k_rope, latent, positions.token_positions(pos))
        kernel = "eager" if need_weights else self.kernel
        dropout = self.dropout if self.training else 0.0
        if absorbed:
            w_uk, w_uv = self._up_weights()
            q = torch.cat((torch.einsum("bhtn,hnc->bhtc", q_nope, w_uk), q_rope), dim=-1)  # (B, H, T, c + r)
            k = torch.cat((latent, k_rope), dim=-1)  # (B, 1, S, c + r)
            out, probs = attend(q, k, latent, mask, None, self.scale, dropout, kernel)  # (B, H, T, c)
            out = torch.einsum("bhtc,hvc->bhtv", out, w_uv)
        else:
            kv = self._heads(self.kv_up(latent.squeeze(1)), self.nope_dim + self.v_dim)
            k_nope, v = kv.split((self.nope_dim, self.v_dim), dim=-1)  # (B, H, S, n), (B, H, S, v)
            k = torch.cat((k_nope, k_rope.expand(-1, self.n_heads, -1, -1)), dim=-1)  # (B, H, S, n + r)
            out, probs = attend(torch.cat((q_nope, q_rope), dim=-1), k, v, mask, None, self.scale, dropout, kernel)
        out = out.transpose(1, 2)  # (B, T, H, v)
        return self.out(out.flatten(2) if packing is None else packing.pack(out).flatten(1)), probs

    def _query(self, x: Tensor) -> Tensor:
        """x (..., d_model) -> the queries of every head (..., H * (n + r))."""
        if self.q is not None:
            return self.q(x)
        return self.q_up(self.q_norm(self.q_down(x)))

    def _up_weights(self) -> tuple[Tensor, Tensor]:
        """kv_up's weight split per head into its key part W_uk (H, n, c) and its value part W_uv (H, v, c)."""
        weight = self.kv_up.weight.unflatten(0, (self.n_heads, self.nope_dim + self.v_dim))
        return weight.split((self.nope_dim, self.v_dim), dim=1)

    def _heads(self, x: Tensor, dim: int) -> Tensor:
        """(B, T, H * dim) -> (B, H, T, dim)."""
        return x.unflatten(-1, (self.n_heads, dim)).transpose(1, 2)

    @staticmethod
    def _unpacked(x: Tensor, packing: TokenPacking | None) -> Tensor:
        """A projection of packed tokens (N, n) back to the batch layout (B, T, n); unpacked x passes."""
        return x if packing is None else packing.unpack(x)

    def extra_repr(self) -> str:
        return (
            f"position={self.position.name}, layer={self.layer}, nope={self.nope_dim}, rope={self.rope_dim}, "
            f"v={self.v_dim}, kv_lora_rank={self.kv_rank}"
        )
