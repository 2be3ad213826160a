"""DeepSeek-V3's router (`Config.sigmoid_router`): sigmoid scores, a bias that steers the choice only, top-k within
the best groups of experts, and a scale on the weights (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", sec.
2.1.2; GLM-4.5 routes the same way).

For a token with router logits z (n_experts,): s = sigmoid(z), and the choice reads s + b, b the per-expert
`score_bias` (DeepSeek's auxiliary-loss-free balancing bias, `e_score_correction_bias`, set outside the gradient).
With G > 1 groups of equal size, each group is scored by the sum of its two best s + b; the experts of all but the
`top_groups` best groups are out of the choice. The token's experts are the `experts_per_token` best s + b among
the rest; their weights are their s alone (no bias), divided by the sum of the k (`Config.norm_topk_prob`; plus
1e-20, as transformers' `Glm4MoeTopkRouter` and `DeepseekV3TopkRouter` add), times `scale`. The router runs in
float32, its weight and bias cast up, as transformers keeps it.

transformers 5 puts -inf on the experts of the groups left out, as DeepSeek's reference code does; 4.57.6 puts 0,
which differs only when fewer than k of the kept experts have s + b > 0 (possible with negative biases); posformer
follows 5 and the reference.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.ops.linear import Linear, linear

NORM_EPS = 1e-20
"""Added to the sum of a token's weights before they are divided by it (transformers' routers add it)."""


def sigmoid_route(
    logits: Tensor,
    score_bias: Tensor,
    top_k: int,
    groups: int = 1,
    top_groups: int = 1,
    renormalise: bool = True,
    scale: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """logits (N, n_experts), score_bias (n_experts,) -> (weights (N, top_k) float32, experts (N, top_k) int64).

    See the module docstring; `groups` must divide n_experts. The experts come in no particular order."""
    scores = torch.sigmoid(logits.float())  # (N, E)
    choice = scores + score_bias.float()  # (N, E): what the choice reads
    n, n_experts = choice.shape
    if groups > 1:
        grouped = choice.view(n, groups, n_experts // groups)  # (N, G, E / G)
        group_scores = grouped.topk(2, dim=-1).values.sum(-1)  # (N, G)
        kept = group_scores.topk(top_groups, dim=-1).indices  # (N, top_groups)
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)  # (N, G)
        choice = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(n, n_experts)
    experts = choice.topk(top_k, dim=-1).indices  # (N, k)
    weights = scores.gather(1, experts)  # (N, k)
    if renormalise:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + NORM_EPS)
    return weights * scale, experts


class SigmoidRouter(nn.Module):
    """The routing of `Config.sigmoid_router` over a `MoEFeedForward`'s router weights.

    score_bias: (n_experts,), a buffer (kept in the state dict, never trained by the gradient), zero at first, in
    float32 whatever the model's default dtype (as transformers 5 keeps `e_score_correction_bias`; `module.to(dtype)`
    still casts it).
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        settings = cfg.sigmoid_router
        self.top_k, self.renormalise = cfg.experts_per_token, cfg.norm_topk_prob
        self.groups, self.top_groups, self.scale = settings["groups"], settings["top_groups"], settings["scale"]
        self.register_buffer("score_bias", torch.zeros(cfg.n_experts, dtype=torch.float32))

    def forward(self, x: Tensor, router: Linear) -> tuple[Tensor, Tensor, Tensor]:
        """x: (N, d_model) -> (logits (N, n_experts) float32, weights (N, k) float32, experts (N, k) int64)."""
        bias = None if router.bias is None else router.bias.float()
        logits = linear(x.float(), router.weight.float(), bias)
        weights, experts = sigmoid_route(
            logits, self.score_bias, self.top_k, self.groups, self.top_groups, self.renormalise, self.scale
        )
        return logits, weights, experts
