"""Normalisation layers and the DeepNorm constants of "DeepNet" (Wang et al. 2022)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posformer.config import Config


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019), normalised in float32.

    x: (..., d) -> (..., d).
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def normalized(self, x: Tensor) -> Tensor:
        """x / sqrt(mean(x^2) + eps) in float32."""
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * self.normalized(x).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class UnitOffsetRMSNorm(RMSNorm):
    """y = x / sqrt(mean(x^2) + eps) * (1 + weight), everything in float32 before the cast back (Gemma).

    The weight starts at zero: the identity scale. x: (..., d) -> (..., d).
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__(dim, eps)
        nn.init.zeros_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return (self.normalized(x) * (1.0 + self.weight.float())).to(x.dtype)


class L2Norm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps), in float32 before the cast back, without weights: Llama 4's QK-norm
    (`Config.qk_norm_kind="l2"`; transformers' `Llama4TextL2Norm`), which makes each vector's L2 norm sqrt(d).

    x: (..., d) -> (..., d).
    """

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


def make_qk_norm(cfg: Config, dim: int) -> nn.Module:
    """The QK-norm of `Config.qk_norm_kind` over `dim` features: the config's `norm` ("norm") or `L2Norm` ("l2")."""
    return L2Norm(cfg.norm_eps) if cfg.qk_norm_kind == "l2" else make_norm(cfg, dim)


def make_norm(cfg: Config, dim: int | None = None) -> nn.Module:
    """The norm `cfg.norm` over `dim` features (default d_model): LayerNorm (DeepNorm uses LayerNorm too),
    RMSNorm, or RMSNorm with a unit offset."""
    dim = cfg.d_model if dim is None else dim
    if cfg.norm == "rmsnorm":
        return RMSNorm(dim, cfg.norm_eps)
    if cfg.norm == "rmsnorm_unit_offset":
        return UnitOffsetRMSNorm(dim, cfg.norm_eps)
    return nn.LayerNorm(dim, eps=cfg.norm_eps, bias=cfg.norm_bias)


def deepnorm_constants(arch: str, n_encoder: int, n_decoder: int, stack: str) -> tuple[float, float]:
    """(alpha, beta) of DeepNet, Figure 2 / Table 1, for the `stack` ("encoder" or "decoder").

    alpha scales the residual: x_{l+1} = LN(alpha * x_l + f(x_l)); beta scales the
    initialisation of the FFN, value and output projections.
      encoder-only  (N layers): alpha = (2N)^(1/4),  beta = (8N)^(-1/4)
      decoder-only  (M layers): alpha = (2M)^(1/4),  beta = (8M)^(-1/4)
      encoder-decoder: encoder alpha = 0.81 (N^4 M)^(1/16), beta = 0.87 (N^4 M)^(-1/16);
                       decoder alpha = (3M)^(1/4),          beta = (12M)^(-1/4)
    """
    if arch == "encoder_decoder":
        n, m = n_encoder, n_decoder
        if stack == "encoder":
            return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)
        return (3 * m) ** 0.25, (12 * m) ** -0.25
    layers = n_encoder if arch == "encoder" else n_decoder
    return (2 * layers) ** 0.25, (8 * layers) ** -0.25
