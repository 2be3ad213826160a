"""`GatedDeltaNet`: a layer that mixes tokens by the gated delta rule instead of attention (Qwen3-Next's and Qwen3.5's
linear-attention layers), in place of self-attention in a `Block` (`Config.mixer`, `posformer.config.linear_attention`).

Shapes: B batch, T tokens, Hk query/key heads of dk features, Hv value heads of dv features (Hv a multiple of Hk),
C = 2 Hk dk + Hv dv channels of the convolution, K its taps.

    x -> in_proj_qkv -> causal depthwise conv (K taps) -> SiLU -> q, k (B, T, Hk, dk), v (B, T, Hv, dv)
    q, k: each head repeated for its Hv / Hk value heads, L2-normalised
    beta = sigmoid(in_proj_b x), g = -exp(A_log) * softplus(in_proj_a x + dt_bias)      (B, T, Hv)
    o = gated delta rule (q, k, v, g, beta)                                              (`ops.gated_delta_rule`)
    out = out_proj(RMSNorm(o) * silu(in_proj_z x))                                       (per value head)

The layer has no position encoding: order enters through the state, decayed by g and corrected at each token, and
the causal convolution over the last K tokens. A training forward runs the chunked form (`chunk_size` tokens a step),
a decoding step of one token the recurrent form, both from the state the KV cache carries for the layer
(`modules.cache.RecurrentState`: the convolution's last K - 1 inputs and the rule's state, a fixed size however long
the sequence). Padded tokens are zeroed before the projections (so they feed zeros to the convolution, as
transformers' `apply_mask_to_padding_states` does) and neither decay nor write the state: a left-padded row gives
the outputs of the row alone. The parameter names are those of transformers' `Qwen3_5GatedDeltaNet`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer import positions
from posformer.config import Config
from posformer.modules.cache import LayerCache, RecurrentState
from posformer.modules.norms import RMSNorm
from posformer.ops.gated_delta_rule import gated_delta_rule_chunked, gated_delta_rule_recurrent
from posformer.ops.linear import Linear
from posformer.ops.masks import AttentionMask
from posformer.ops.packing import TokenPacking

L2_EPS = 1e-6  # the queries' and keys' L2 norm: x / sqrt(sum(x^2) + eps), as flash-linear-attention's l2norm


class GatedRMSNorm(RMSNorm):
    """RMSNorm of x gated by SiLU of z: weight * x / sqrt(mean(x^2) + eps) * silu(z), the gate in float32
    (Qwen3-Next's RMSNormGated). x, z: (..., d) -> (..., d) in x's dtype."""

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:
        normed = self.weight * self.normalized(x).to(x.dtype)
        return (normed * F.silu(gate.float())).to(x.dtype)


def refuse_unsupported(mask: AttentionMask, need_weights: bool) -> None:
    """A ValueError naming what a gated DeltaNet layer cannot do: attention weights, packed documents."""
    if need_weights:
        raise ValueError(
            "output_attentions: a gated DeltaNet layer (Config.mixer='gated_deltanet') has no attention weights"
        )
    if mask.rule is not None and mask.rule.documents is not None:
        raise ValueError(
            "document_ids: a gated DeltaNet layer (Config.mixer='gated_deltanet') cannot pack documents: its state "
            "would carry one document into the next"
        )


def l2_normalized(x: Tensor) -> Tensor:
    """x (..., d) / sqrt(sum(x^2) + 1e-6), in float32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + L2_EPS)


class GatedDeltaNet(nn.Module):
    """The gated DeltaNet mixer (see the module docstring), sized by `Config.gated_deltanet`."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        sizes = cfg.gated_deltanet
        self.key_heads, self.value_heads = sizes["key_heads"], sizes["value_heads"]
        self.key_dim, self.value_dim = sizes["key_dim"], sizes["value_dim"]
        self.conv_kernel, self.chunk_size = sizes["conv_kernel"], sizes["chunk_size"]
        keys, values = self.key_heads * self.key_dim, self.value_heads * self.value_dim
        self.split = (keys, keys, values)
        self.channels = sum(self.split)
        self.in_proj_qkv = Linear(cfg.d_model, self.channels, bias=False)
        self.in_proj_z = Linear(cfg.d_model, values, bias=False)
        self.in_proj_b = Linear(cfg.d_model, self.value_heads, bias=False)
        self.in_proj_a = Linear(cfg.d_model, self.value_heads, bias=False)
        self.conv1d = nn.Conv1d(self.channels, self.channels, self.conv_kernel, groups=self.channels, bias=False)
        self.A_log = nn.Parameter(torch.empty(self.value_heads).uniform_(1.0, 16.0).log())
        self.dt_bias = nn.Parameter(inverse_softplus(decay_steps(self.value_heads)))
        self.norm = GatedRMSNorm(self.value_dim, cfg.norm_eps)
        self.out_proj = Linear(values, cfg.d_model, bias=False)

    def forward(
        self,
        x: Tensor,
        mask: AttentionMask,
        pos: Tensor,
        cache: LayerCache | None = None,
        need_weights: bool = False,
        packing: TokenPacking | None = None,
    ) -> tuple[Tensor, None]:
        """x: (B, T, d_model) at positions pos (B, T), after the tokens the `cache` has seen (mask covers both:
        only its padding is read); with a `packing`, x holds its real tokens only: (N, d_model).

        Returns the output, shaped as x, and None (no attention weights). `need_weights` and packed documents are
        refused by `refuse_unsupported`, which the `Stack` calls once, before any of its layers runs.
        """
        x = x if packing is None else packing.unpack(x)
        batch, length, _ = x.shape
        keep = self._real_tokens(mask, length)
        if keep is not None:
            x = x * keep[..., None].to(x.dtype)
        state = None if cache is None else cache.recurrent
        mixed, conv_state = self._convolved(self.in_proj_qkv(x), None if state is None else state.conv)
        q, k, v = mixed.split(self.split, dim=-1)
        q, k = (self._key_heads(t) for t in (q, k))  # (B, Hv, T, dk)
        v = v.unflatten(-1, (self.value_heads, self.value_dim)).transpose(1, 2)  # (B, Hv, T, dv)
        beta = self.in_proj_b(x).float().sigmoid()  # (B, T, Hv)
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias.float())
        if keep is not None:  # a padded token neither decays nor writes the state
            beta, g = beta * keep[..., None], g * keep[..., None]
        beta, g = beta.transpose(1, 2), g.transpose(1, 2)  # (B, Hv, T)
        memory = None if state is None else state.memory
        if length == 1:  # a decoding step
            out, memory = gated_delta_rule_recurrent(q, k, v, g, beta, memory)
        else:
            out, memory = gated_delta_rule_chunked(q, k, v, g, beta, self.chunk_size, memory)
        if cache is not None:
            cache.recurrent = RecurrentState(conv_state, memory)
            cache.append_positions(positions.token_positions(pos))
        z = self.in_proj_z(x).unflatten(-1, (self.value_heads, self.value_dim))  # (B, T, Hv, dv)
        out = self.norm(out.transpose(1, 2), z).flatten(2)  # (B, T, Hv * dv)
        return self.out_proj(out if packing is None else packing.pack(out)), None

    @staticmethod
    def _real_tokens(mask: AttentionMask, length: int) -> Tensor | None:
        """(B, T) bool: whether each token of the input is real (the mask's last T key columns), or None."""
        if mask.rule is None or mask.rule.key_keep is None:
            return None
        return mask.rule.key_keep[:, -length:]

    def _convolved(self, mixed: Tensor, conv_state: Tensor | None) -> tuple[Tensor, Tensor]:
        """mixed (B, T, C) through the causal depthwise convolution and SiLU, after the K - 1 inputs before it
        (conv_state (B, C, K - 1), zeros when None) -> the outputs (B, T, C) and the last K - 1 inputs."""
        mixed = mixed.transpose(1, 2)  # (B, C, T)
        if conv_state is None:
            conv_state = mixed.new_zeros(mixed.shape[0], self.channels, self.conv_kernel - 1)
        inputs = torch.cat((conv_state.to(mixed.dtype), mixed), dim=-1)
        out = F.silu(F.conv1d(inputs, self.conv1d.weight.to(mixed.dtype), groups=self.channels))
        return out.transpose(1, 2), inputs[:, :, mixed.shape[-1] :]

    def _key_heads(self, x: Tensor) -> Tensor:
        """Queries or keys (B, T, Hk * dk) -> (B, Hv, T, dk), each head repeated for its value heads, L2-normed."""
        x = x.unflatten(-1, (self.key_heads, self.key_dim))
        x = x.repeat_interleave(self.value_heads // self.key_heads, dim=2)
        return l2_normalized(x).transpose(1, 2)

    def extra_repr(self) -> str:
        return (
            f"key_heads={self.key_heads}, value_heads={self.value_heads}, key_dim={self.key_dim}, "
            f"value_dim={self.value_dim}, conv_kernel={self.conv_kernel}, chunk_size={self.chunk_size}"
        )


def decay_steps(heads: int, low: float = 1e-3, high: float = 0.1) -> Tensor:
    """(heads,) step sizes drawn log-uniformly in [low, high] (Mamba 2's and flash-linear-attention's dt init)."""
    return torch.empty(heads).uniform_(math.log(low), math.log(high)).exp()


def inverse_softplus(y: Tensor) -> Tensor:
    """x with softplus(x) = y (> 0): y + log(1 - exp(-y))."""
    return y + torch.log(-torch.expm1(-y))
