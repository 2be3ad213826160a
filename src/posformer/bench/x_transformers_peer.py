"""x-transformers (lucidrains) as a second peer of the speed benchmark: the same LLaMA-shape decoder.

Built from the benchmark's `Config`: rotary positions over the whole head (base 10000), RMSNorm, SwiGLU of the same
inner size, no attention or output biases, untied embeddings, PyTorch SDPA
("flash") attention. Its SwiGLU input projection keeps a bias that x-transformers
does not let one drop (d_ff * 2 parameters per layer), so it is 0.07% larger at
the default size; the report gives its parameter count. Training uses
x-transformers' own `AutoregressiveWrapper` loss (next-token cross-entropy).
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

import posformer as pf

X_TRANSFORMERS_REQUIREMENT = "'posformer[bench]'"  # x-transformers, pinned in pyproject.toml


def x_transformers_available() -> bool:
    return importlib.util.find_spec("x_transformers") is not None


def llama_shaped_decoder(cfg: pf.Config, **options: Any) -> nn.Module:
    """x-transformers' `Decoder` of `cfg`'s LLaMA shape: rotary positions over the whole head, RMSNorm, SwiGLU of
    the same inner size, no output bias in the feed-forward; `options` are further `Decoder` arguments."""
    from x_transformers import Decoder

    return Decoder(
        dim=cfg.d_model,
        depth=cfg.n_layers,
        heads=cfg.n_heads,
        attn_dim_head=cfg.head_dim,
        rotary_pos_emb=True,
        rotary_emb_dim=cfg.head_dim,
        use_rmsnorm=True,
        ff_glu=True,
        ff_swish=True,
        ff_mult=cfg.ff_dim / cfg.d_model,
        ff_no_bias=True,
        **options,
    )


class XTransformersLM(nn.Module):
    """`model(input_ids)` -> .logits (B, T, V); `model(input_ids, labels=input_ids)` -> .loss, the
    next-token loss of x-transformers' AutoregressiveWrapper (labels must be the input ids)."""

    def __init__(self, cfg: pf.Config) -> None:
        super().__init__()
        if float(cfg.position_params["theta"]) != 10000.0:
            raise ValueError("x-transformers' rotary base is fixed at 10000: the benchmark config must use it")
        from x_transformers import AutoregressiveWrapper, TransformerWrapper

        layers = llama_shaped_decoder(cfg, attn_flash=True)
        self.net = TransformerWrapper(
            num_tokens=cfg.vocab_size,
            max_seq_len=cfg.max_positions,
            attn_layers=layers,
            tie_embedding=cfg.tie_embeddings,
        )
        self.wrapper = AutoregressiveWrapper(self.net)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        if labels is None:
            return SimpleNamespace(logits=self.net(input_ids), loss=None)
        if labels is not input_ids and not torch.equal(labels, input_ids):
            raise ValueError("XTransformersLM trains on next-token prediction: labels must equal input_ids")
        return SimpleNamespace(logits=None, loss=self.wrapper(input_ids))
