"""Weight initialisation schemes, chosen by `Config.init`.

"normal": every `nn.Linear` and `nn.Embedding` weight N(0, init_std), biases 0
(norm weights stay 1), and so the experts of a mixture-of-experts feed-forward. "t5": the Mesh TensorFlow
scheme of Hugging Face's `T5PreTrainedModel._init_weights` (initializer_factor 1), drawn after "normal":

    token (and token-type) embeddings   N(0, 1)
    attention queries                   N(0, (d_model * d_head) ** -0.5)
    attention keys and values           N(0, d_model ** -0.5)
    attention output                    N(0, (n_heads * d_head) ** -0.5)
    FFN up (gate and value)             N(0, d_model ** -0.5)   (each expert's too, `modules.moe`)
    FFN down                            N(0, d_ff ** -0.5)      (an expert's: N(0, expert_d_ff ** -0.5))
    T5 relative bias tables             N(0, d_model ** -0.5)   (`positions.t5.SchemeInitialised`)
    head projections (untied)           N(0, in_features ** -0.5)

The t5 preset has no 1/sqrt(d_head) attention scale and scales a tied head by
d_model ** -0.5, so it relies on this scheme: under N(0, 0.02) its attention stays
uniform and its logits near 0 for hundreds of steps. Head projections follow
HF's `qa_outputs` and classification layers (d_model ** -0.5) and Mesh TF's untied
softmax layer (fan-in); HF 4.57 draws an untied `lm_head` from N(0, 1) instead.
Other parameters (another position encoding's tables, biases, norms) keep "normal".
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posformer.modules.attention import CrossAttention
from posformer.modules.feedforward import FeedForward
from posformer.modules.moe import Experts
from posformer.modules.norms import deepnorm_constants
from posformer.modules.pointer_generator import PointerGenerator
from posformer.modules.sink_tokens import SinkTokens


def normal_init_(module: nn.Module, std: float) -> None:
    """The "normal" scheme for one module (use with `model.apply`)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, (Experts, SinkTokens, PointerGenerator)):
        module.reset_parameters(std)


@torch.no_grad()
def t5_init_(model: nn.Module) -> None:
    """Re-draw `model`'s (a `Transformer`) weights with the "t5" scheme, in `model.modules()` order.

    Tied weights are drawn once, as the token embedding.
    """
    from posformer.modules.attention import Attention, CrossAttention
    from posformer.positions.contract import SchemeInitialised

    cfg = model.cfg
    seen: set[int] = set()

    def draw(weight: Tensor, std: float) -> None:
        if id(weight) not in seen:
            seen.add(id(weight))
            weight.normal_(0.0, std)

    embeddings = model.embeddings()
    for module in model.modules():
        if any(module is m for m in embeddings):
            draw(module.weight, 1.0)
        elif isinstance(module, SchemeInitialised):  # an encoding with its own "t5" draw (T5's table)
            module.init_weights_("t5")
        elif isinstance(module, Attention):
            q_dim = module.q_dim
            q_std, kv_std = (cfg.d_model * module.head_dim) ** -0.5, cfg.d_model**-0.5
            if isinstance(module, CrossAttention):
                draw(module.q.weight, q_std)
                draw(module.kv.weight, kv_std)
            else:
                seen.add(id(module.qkv.weight))
                module.qkv.weight[:q_dim].normal_(0.0, q_std)
                module.qkv.weight[q_dim:].normal_(0.0, kv_std)
            draw(module.out.weight, q_dim**-0.5)
        elif isinstance(module, FeedForward):
            draw(module.up.weight, cfg.d_model**-0.5)
            draw(module.down.weight, module.d_ff**-0.5)
        elif isinstance(module, Experts):
            draw(module.up, cfg.d_model**-0.5)
            draw(module.down, module.d_ff**-0.5)
        elif module is model.head:
            for linear in (m for m in module.modules() if isinstance(m, nn.Linear)):
                draw(linear.weight, linear.in_features**-0.5)


def deepnorm_alphas(cfg) -> dict[str, tuple[float, float]]:
    """(alpha, beta) of DeepNet for the "encoder" and the "decoder" stack; (1, 1) unless `Config.norm` is deepnorm."""
    if cfg.norm != "deepnorm":
        return {"encoder": (1.0, 1.0), "decoder": (1.0, 1.0)}
    return {s: deepnorm_constants(cfg.arch, cfg.n_layers, cfg.decoder_layers, s) for s in ("encoder", "decoder")}


def deepnorm_init_(model: nn.Module, constants: dict[str, tuple[float, float]]) -> None:
    """DeepNet init (Wang et al. 2022): Xavier normal, with gain beta on the FFN, value and output projections of
    every block of `model.encoder` and `model.decoder`; `constants` from `deepnorm_alphas`."""
    for name in ("encoder", "decoder"):
        stack = getattr(model, name, None)
        if stack is None:
            continue
        beta = constants[name][1]
        for block in stack.layers:
            for attn in filter(None, (block.attn, block.cross_attn)):
                cross = isinstance(attn, CrossAttention)
                fused = attn.kv if cross else attn.qkv
                nn.init.xavier_normal_(fused.weight)
                # the value rows: kv's second half, or qkv's third block (an output gate may follow)
                start, rows = (attn.kv_dim, attn.kv_dim) if cross else (sum(attn.qkv_sizes[:2]), attn.qkv_sizes[2])
                with torch.no_grad():
                    fused.weight[start : start + rows] *= beta
                if cross:
                    nn.init.xavier_normal_(attn.q.weight)
                nn.init.xavier_normal_(attn.out.weight, gain=beta)
            ffn = block.ffn
            dense = isinstance(ffn, FeedForward)
            for weight in [ffn.up.weight, ffn.down.weight] if dense else [*ffn.experts.up, *ffn.experts.down]:
                nn.init.xavier_normal_(weight, gain=beta)  # an expert's: a view of the batched tensor
