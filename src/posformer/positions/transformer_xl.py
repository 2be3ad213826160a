"""Transformer-XL relative positions (Dai et al. 2019, "Transformer-XL: Attentive Language Models
Beyond a Fixed-Length Context", section 3.3).

The score of query i and key j splits into four terms:

    A_ij = q_i . k_j                      (a) content-content (computed by the attention itself)
         + q_i . W_R,l R_{i-j}            (b) content-position
         + u_l . k_j                      (c) global content bias
         + v_l . W_R,l R_{i-j}            (d) global position bias

R_d is a fixed sinusoid of the distance d = i - j over d_model dims in the
[sin | cos] layout of the paper's code and of Hugging Face TransfoXL
(inv_freq = 1 / base^(2m / d_model)); W_R,l (`proj[l]`, d_model -> n_heads * head_dim,
no bias) is layer l's own projection of it, and u_l, v_l (n_heads, head_dim) are
Hugging Face's `r_w_bias` and `r_r_bias`. The bias hook returns

    bias_ij = scale * ((q_i + v_l) . W_R,l R_{i-j} + u_l . k_j)      (B, H, Tq, Tk)

since TransfoXL scales the whole sum (a)+(b)+(c)+(d). The distance comes from the
position tensors, so cached decoding and left padding work; it may be negative
(an encoder), and any length works. Parameters: `base` (10000), `untie_r`
(True: u, v per layer, shape (n_layers, H, dh); False: shared, shape (1, H, dh),
Hugging Face's `untie_r=False`), `clamp_len` (> 0: |i - j| is clamped to it, as
TransfoXL's `clamp_len`; -1: no clamp).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from posformer.ops.linear import Linear
from posformer.positions.absolute import sinusoidal_angles_to_table
from posformer.positions.contract import PositionEncoding
from posformer.positions.frequencies import frequencies
from posformer.positions.registry import register
from posformer.positions.relative_scores import (
    Diagonal,
    expand_heads,
    pair_rows,
    query_position_scores,
    relative_distance,
)
from posformer.positions.sizes import Sizes


@register("transformer_xl")
class TransformerXL(PositionEncoding):
    """Sinusoidal relative positions projected per layer, with global biases u and v. Any length."""

    adds_bias = True

    defaults = {"base": 10000.0, "untie_r": True, "clamp_len": -1}
    cpu_bias_block_bytes = 16 * 2**20  # 16k forward 8.5 s a layer, 19.6 s at 4 MiB (docs/memory.md)
    compiles_whole = False  # the sinusoids computed: the span of distances that occur (`_distances`)
    flex_refusal = (
        "its bias (q_i + v).W_R R_{i-j} is a product over the head dim for each pair, at any distance (no bounded "
        "table per query)"
    )

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        if not isinstance(params["base"], (int, float)) or isinstance(params["base"], bool) or params["base"] <= 1:
            raise cls.param_error(cls.name, "base", params["base"], "a number > 1")
        if not isinstance(params["untie_r"], bool):
            raise cls.param_error(cls.name, "untie_r", params["untie_r"], "True or False")
        clamp = params["clamp_len"]
        if not isinstance(clamp, int) or isinstance(clamp, bool) or (clamp <= 0 and clamp != -1):
            raise cls.param_error(cls.name, "clamp_len", clamp, "a positive integer, or -1 for no clamp")
        if sizes.d_model % 2:
            raise ValueError(f"Config.d_model={sizes.d_model} must be even for position='transformer_xl'")

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.clamp_len = int(self.params["clamp_len"])
        self.register_buffer("inv_freq", frequencies(sizes.d_model, float(self.params["base"])), persistent=False)
        inner = sizes.n_heads * sizes.head_dim
        self.proj = nn.ModuleList(Linear(sizes.d_model, inner, bias=False) for _ in range(n_layers))
        n_bias = n_layers if self.params["untie_r"] else 1
        self.u = nn.Parameter(torch.randn(n_bias, sizes.n_heads, sizes.head_dim) * sizes.init_std)
        self.v = nn.Parameter(torch.randn(n_bias, sizes.n_heads, sizes.head_dim) * sizes.init_std)

    def sinusoid(self, dist: Tensor) -> Tensor:
        """R_d for distances d: (N,) -> (N, d_model), [sin | cos] layout."""
        angles = dist.to(torch.float32)[:, None] * self.inv_freq
        return sinusoidal_angles_to_table(angles, "half")

    def distances(self, q_pos: Tensor, k_pos: Tensor) -> tuple[int, int, Tensor | Diagonal]:
        """The (clamped) distances i - j that occur, low..high, and each pair's row among them: (B or 1, Tq, Tk)
        or a `Diagonal`; computed once per forward."""
        return self.per_forward("distances", q_pos, k_pos, self._distances)

    def _distances(self, q_pos: Tensor, k_pos: Tensor) -> tuple[int, int, Tensor | Diagonal]:
        low = int((q_pos.amin(-1) - k_pos.amax(-1)).min())  # per batch row, as the pairs are
        high = int((q_pos.amax(-1) - k_pos.amin(-1)).max())
        if self.causal:  # a key after its query is masked and its bias never used
            low, high = max(low, 0), max(high, 0)

        def clamped() -> Tensor:
            dist = relative_distance(q_pos, k_pos)
            return dist.clamp(min=0) if self.causal else dist

        if self.clamp_len > 0 and max(-low, high) > self.clamp_len:
            low, high = max(low, -self.clamp_len), min(high, self.clamp_len)
            return low, high, clamped().clamp(-self.clamp_len, self.clamp_len) - low
        return low, high, pair_rows(q_pos, k_pos, clamped, low)

    def position_vectors(self, low: int, high: int, layer: int, device: torch.device) -> Tensor:
        """W_R,l R_d for the distances d = low..high: (H, R, dh). The blocks of a long forward without gradients
        share them (`per_forward_range`): each would project the sinusoids of every distance again."""

        def project(first: int, last: int) -> Tensor:
            w = self.proj[layer]
            r = w(self.sinusoid(torch.arange(first, last + 1, device=device)).to(w.weight.dtype))  # (R, H * dh)
            return r.unflatten(-1, (self.n_heads, self.head_dim)).transpose(0, 1)

        return self.per_forward_range(("position_vectors", layer), low, high, project)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        low, high, index = self.distances(q_pos, k_pos)
        r = self.position_vectors(low, high, layer, q.device)  # (H, R, dh)
        i = layer if self.u.shape[0] > 1 else 0
        u, v = self.u[i], self.v[i]  # (H, dh)
        # the scale multiplies the (T, dh) operands, not the (T, T) scores
        query = (q + v[:, None].to(q.dtype)) * self.scale
        position = query_position_scores(query, r, index, k.shape[-2])  # (b) + (d)
        content = torch.matmul(expand_heads(k, q.shape[1]), u[:, :, None].to(k.dtype) * self.scale)  # (c)
        return position + content.transpose(-1, -2)
