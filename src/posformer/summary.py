"""A readable summary of a model: layers, parameters per component, position encoding, FLOPs per token."""

from __future__ import annotations

from collections import Counter

from torch import nn

from posformer.config import Config
from posformer.model import Transformer
from posformer.modules.attention import Attention, CrossAttention
from posformer.modules.feedforward import FeedForward
from posformer.modules.gated_deltanet import GatedDeltaNet
from posformer.modules.latent_attention import LatentAttention
from posformer.modules.moe import MoEFeedForward
from posformer.positions.contract import PositionEncoding


def _layer_kinds(cfg: Config) -> list[tuple[str, int, str]]:
    """(label, its number of layers, its settings) for each label of `Config.layer_types`, in order of first use;
    [] without them."""
    labels = cfg.layer_types or []
    return [
        (label, labels.count(label), str(cfg.layer_settings.get(label) or "the config's own settings"))
        for label in dict.fromkeys(labels)
    ]


def component_of(model: Transformer, module: nn.Module) -> str:
    if isinstance(module, PositionEncoding):
        return "position encoding"
    if isinstance(module, Attention):
        return "cross-attention" if isinstance(module, CrossAttention) else "self-attention"
    if isinstance(module, LatentAttention):
        return "self-attention"
    if isinstance(module, GatedDeltaNet):
        return "gated deltanet"
    if isinstance(module, (FeedForward, MoEFeedForward)):
        return "feed-forward"
    if module is model.head:
        return "head"
    if any(module is m for m in model.embeddings()):
        return "embeddings"
    return ""


def parameters_by_component(model: Transformer) -> dict[str, int]:
    """Parameter counts per component; each shared (tied) tensor is counted once, where it is first seen."""
    counts: Counter[str] = Counter()
    seen: set[int] = set()

    def visit(module: nn.Module, component: str) -> None:
        component = component_of(model, module) or component
        for param in module.parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                counts[component or "norms"] += param.numel()
        for child in module.children():
            visit(child, component)

    visit(model, "")
    return dict(counts)


def matmul_params_per_token(model: Transformer) -> int:
    """Weights of every matrix product a token passes through (tied head included, embeddings excluded; of a
    mixture of experts, the router and the `experts_per_token` experts a token goes to)."""
    moe = [m for m in model.modules() if isinstance(m, MoEFeedForward)]
    routers = {id(m.router) for m in moe}
    dense = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear) and id(m) not in routers)
    return dense + sum(m.matmul_params_per_token() for m in moe)


def flops_per_token(model: Transformer, context: int) -> dict[str, float]:
    """Forward FLOPs per token at a context of `context` tokens, counted as in Kaplan et al. 2020:

    2 * (matrix weights) for the projections, plus 2 * context * d_attn for q.k^T and
    2 * context * d_attn for probs.v in every attention layer (full attention; a causal
    model does half of that on average). Training is about 3x the forward pass.
    """
    cfg = model.cfg
    d_attn = cfg.n_heads * cfg.head_dim
    d_qk, d_v = d_attn, d_attn
    if cfg.latent_attention is not None:  # MLA as a full pass computes it: heads of nope + rope, values of v_dim
        latent = cfg.latent_attention
        d_qk, d_v = cfg.n_heads * (latent["nope_dim"] + cfg.head_dim), cfg.n_heads * latent["v_dim"]
    attention_layers = sum(1 for m in model.modules() if isinstance(m, (Attention, LatentAttention)))
    dense = 2 * matmul_params_per_token(model)
    attention = 2 * attention_layers * context * (d_qk + d_v)
    return {"dense": dense, "attention": attention, "forward": dense + attention, "train": 3 * (dense + attention)}


def describe(cfg: Config, context: int | None = None) -> str:
    """The text `posformer info` prints."""
    import torch

    with torch.device("meta"):  # sizes only: a 7B preset allocates nothing
        model = Transformer(cfg)
    context = context or cfg.max_positions
    lines = [
        f"arch             {cfg.arch}",
        f"layers           {cfg.n_layers}"
        + (f" encoder + {cfg.decoder_layers} decoder" if cfg.arch == "encoder_decoder" else ""),
        f"d_model          {cfg.d_model} ({cfg.n_heads} heads x {cfg.head_dim}, {cfg.kv_heads} kv heads), "
        f"d_ff {cfg.ff_dim}",
        *(
            [f"experts          {cfg.n_experts} of d_ff {cfg.expert_ff_dim}, {cfg.experts_per_token} per token"]
            if cfg.n_experts is not None
            else []
        ),
        f"vocab            {cfg.vocab_size}",
        f"position         {cfg.position} {cfg.position_params or ''}".rstrip(),
        *[f"  {label:<15} x{count}: {settings}" for label, count, settings in _layer_kinds(cfg)],
        f"norm             {cfg.norm}, {cfg.norm_placement}-norm; activation {cfg.activation}",
        f"attention scale  {cfg.scale:.6g}; kernel {cfg.attn_impl}",
        f"head             {cfg.head_kind}" + (" (tied to embeddings)" if cfg.tie_embeddings else ""),
        "",
        "parameters",
    ]
    counts = parameters_by_component(model)
    total = sum(counts.values())
    for name, count in sorted(counts.items(), key=lambda item: -item[1]):
        lines.append(f"  {name:<18} {count:>14,}  {100 * count / total:5.1f}%")
    lines.append(f"  {'total':<18} {total:>14,}")
    flops = flops_per_token(model, context)
    lines += [
        "",
        f"FLOPs per token at context {context}",
        f"  forward          {flops['forward']:.4g}  (dense {flops['dense']:.4g} + attention {flops['attention']:.4g})",
        f"  training (~3x)   {flops['train']:.4g}",
    ]
    return "\n".join(lines)
