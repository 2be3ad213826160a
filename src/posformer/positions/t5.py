"""T5 relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning
with a Unified Text-to-Text Transformer", section 2.1).

Each head adds a learned scalar to its attention logits that depends only on the
bucket of the relative position rel = key_pos - query_pos:

    logits[b, h, i, j] = scale * q_i . k_j + table[bucket(k_pos[b, j] - q_pos[b, i]), h]

Buckets: half of them hold exact distances 0 .. max_exact - 1, the other half
logarithmically wider bins up to `max_distance`; every distance beyond lands in
the last bucket (the table saturates by design, so any length works). The
bidirectional form (encoders) spends half of the buckets on each sign of rel;
the unidirectional form (causal decoders) maps every rel > 0 (a future key) to
bucket 0 and uses all buckets for the past. The same rule as Mesh TensorFlow and
Hugging Face `T5Attention._relative_position_bucket`.

T5 puts one table in the first layer of each stack and reuses it in every
layer; here the table is the stack's position-encoding instance, shared alike.
T5 uses attention scale 1.0 (`Config.attn_scale=1.0`); the bias is never rescaled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posformer.positions.contract import PositionEncoding
from posformer.positions.registry import register
from posformer.positions.sizes import Sizes


def t5_bucket(rel: Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """The bucket in [0, num_buckets) of each relative position rel = key_pos - query_pos.

    rel: integer tensor of any shape -> long tensor of the same shape.
    """
    rel = rel.long()
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).long() * num_buckets
        distance = rel.abs()
    else:
        distance = (-rel).clamp(min=0)
    max_exact = num_buckets // 2
    # log of distance / max_exact, computed only where it is used (distance >= max_exact > 0)
    ratio = distance.clamp(min=max_exact).float() / max_exact
    large = max_exact + (torch.log(ratio) / math.log(max_distance / max_exact) * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


@register("t5")
class T5Bias(PositionEncoding):
    """Bucketed relative bias: one `nn.Embedding(num_buckets, n_heads)` per stack, shared by its layers.

    Bidirectional in an encoder stack, unidirectional in a causal (decoder) stack.
    """

    adds_bias = True
    flex_form = "distance_table"

    defaults: ClassVar[dict[str, Any]] = {"num_buckets": 32, "max_distance": 128}

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        super().check_config(sizes, params, causal)
        buckets = cls.require_int(params, "num_buckets", 4, expected="an integer >= 4")
        # the exact range of the stack: num_buckets // 2 causal, // 4 bidirectional (half the buckets a side)
        max_exact = buckets // 2 if causal else buckets // 4
        cls.require_int(
            params,
            "max_distance",
            max_exact + 1,
            expected=f"an integer > {max_exact} (the exact-distance buckets of num_buckets={buckets})",
        )

    def __init__(
        self, sizes: Sizes, params: Mapping[str, Any] | None = None, causal: bool = True, n_layers: int = 1
    ) -> None:
        super().__init__(sizes, params, causal, n_layers)
        self.num_buckets = int(self.params["num_buckets"])
        self.max_distance = int(self.params["max_distance"])
        self.table = nn.Embedding(self.num_buckets, sizes.n_heads)

    @torch.no_grad()
    def init_weights_(self, scheme: str) -> None:
        """Under "t5" the table is N(0, d_model ** -0.5) (Mesh TensorFlow, HF's `T5PreTrainedModel`); any other
        scheme keeps the "normal" draw (`SchemeInitialised`)."""
        if scheme == "t5":
            self.table.weight.normal_(0.0, self.d_model**-0.5)

    def distance_bias(self, rel: Tensor, layer: int = 0) -> Tensor:
        """rel: (R,) = key_pos - query_pos -> table[bucket(rel)].T: (H, R)."""
        return self.table.weight[t5_bucket(rel, not self.causal, self.num_buckets, self.max_distance)].T

    @property
    def saturation_distance(self) -> int:
        """max_distance: every distance beyond it shares the last bucket (`Saturating`)."""
        return self.max_distance

    def buckets(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """q_pos: (B, Tq), k_pos: (B, Tk) -> buckets (B, Tq, Tk) of k_pos - q_pos."""
        rel = k_pos[:, None, :] - q_pos[:, :, None]
        return t5_bucket(rel, not self.causal, self.num_buckets, self.max_distance)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """-> table[bucket(k_pos - q_pos)]: (B or 1, H, Tq, Tk), the same for every layer: computed once per
        forward, as T5 computes it in its first layer and hands it on."""
        return self.per_forward("bias", q_pos, k_pos, self._bias)

    def _bias(self, q_rows: Tensor, k_rows: Tensor) -> Tensor:
        """q_rows: (B or 1, Tq), k_rows: (B or 1, Tk) -> table[bucket]: (B or 1, H, Tq, Tk)."""
        table: Tensor = self.table(self.buckets(q_rows, k_rows))  # (B or 1, Tq, Tk, H)
        return table.permute(0, 3, 1, 2)
