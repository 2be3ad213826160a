"""`Stack`: the position encodings, the blocks and the final norm of an encoder or a decoder.

The stack resolves its per-layer position settings (`Config.layer_types`) once, when it is built, and hands
each block its layer's config, encoding and index.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from posformer import positions
from posformer.config import Config
from posformer.modules.blocks import Block
from posformer.modules.cache import Cache, KeysSeen
from posformer.modules.gated_deltanet import refuse_unsupported
from posformer.modules.norms import make_norm
from posformer.modules.per_layer_inputs import PerLayerInputs
from posformer.modules.shared_kv import SharedKV, kv_shares
from posformer.ops.masks import AttentionMask, KeyReach
from posformer.ops.packing import TokenPacking
from posformer.positions.contract import ForgetsKeys, GoesStale, PositionEncoding


class Stack(nn.Module):
    """A position encoding, N blocks and an optional final norm. The encoder or the decoder.

    The stack owns the encodings (`self.position`, the config's own, which also embeds the tokens; and
    `layer_positions`, one for each other encoding or parameters that `Config.layer_settings` give, under the
    first label that gives them: layers with the same position settings share one encoding) and hands each
    block its layer's encoding, layer index and config when it builds it. A layer whose `Config.mixer` is not
    attention (a gated DeltaNet, `modules.gated_deltanet`) has no encoding and is not counted among an encoding's
    layers (`recurrent_layers`).

    `activation_checkpointing` (off by default; `Transformer.set_activation_checkpointing`): while training, each
    block keeps only its input for the backward pass and runs again there (`torch.utils.checkpoint`), so that
    the activations kept grow with the layers' inputs alone, at the cost of a second forward of each block.
    """

    activation_checkpointing = False

    def __init__(self, cfg: Config, n_layers: int, causal: bool, cross: bool, alpha: float = 1.0) -> None:
        super().__init__()
        self.causal = causal
        labels = cfg.layer_types or [None] * n_layers
        layer_configs = cfg.layer_configs(n_layers)
        owners = self._owners(cfg, labels, layer_configs)
        attending = [c.mixer == "attention" for c in layer_configs]  # a layer of another mixer has no encoding
        self.recurrent_layers = [i for i, a in enumerate(attending) if not a]
        served = {
            owner: [i for i, o in enumerate(owners) if o == owner and attending[i]]
            for owner in dict.fromkeys([None, *owners])
        }
        self.position = positions.build(cfg, causal=causal, n_layers=len(served[None]))
        self.layer_positions = nn.ModuleDict(
            {
                owner: positions.build(layer_configs[layers[0]], causal=causal, n_layers=len(layers))
                for owner, layers in served.items()
                if owner is not None and layers
            }
        )
        self.embed_norm = make_norm(cfg) if cfg.embed_norm else None
        self.dropout = nn.Dropout(cfg.dropout)
        self.per_layer_inputs = PerLayerInputs(cfg) if cfg.per_layer_inputs is not None else None
        self.shared_kv = SharedKV()  # what KV-sharing layers lend and read in a forward (Config.kv_sources)
        shares = kv_shares(cfg.kv_sources, n_layers, self.shared_kv)
        self.layers = nn.ModuleList(
            Block(
                c,
                position=(self.position if owner is None else self.layer_positions[owner]) if attending[i] else None,
                layer=served[owner].index(i) if attending[i] else 0,
                cross=cross,
                alpha=alpha,
                experts=cfg.uses_experts(i),
                kv_share=shares[i],
            )
            for i, (c, owner) in enumerate(zip(layer_configs, owners))
        )
        if not cfg.first_attn_norm:  # the embedding norm just before it normalises its input (ModernBERT)
            self.layers[0].attn_res.norm = nn.Identity()
        self.reaches: list[KeyReach] = list(dict.fromkeys(block.reach for block in self.layers))  # each distinct one
        self.norm = make_norm(cfg) if cfg.use_final_norm else None

    @staticmethod
    def _owners(cfg: Config, labels: list, layer_configs: list[Config]) -> list[str | None]:
        """For each layer, whose encoding it uses: None for the config's own position settings (and head width),
        else the first label that gives its settings."""

        def setting(c: Config) -> tuple[str, int, str]:
            return c.position, c.head_dim, json.dumps(dict(c.position_params), sort_keys=True, default=str)

        first: dict[tuple[str, str], str | None] = {setting(cfg): None}
        return [first.setdefault(setting(c), label) for label, c in zip(labels, layer_configs)]

    @property
    def encodings(self) -> list[PositionEncoding]:
        """Every position encoding of the stack: its own first, then those of its layer types."""
        return [self.position, *self.layer_positions.values()]

    def _memo_holders(self) -> list[PositionEncoding | SharedKV]:
        """What keeps values for one forward of the stack (`forward_scope`, `memo_snapshot`, `memo_restored`): the
        encodings and the keys and values KV-sharing layers lend."""
        return [*self.encodings, self.shared_kv]

    def stale_beyond(self) -> int | None:
        """The shortest length past which an encoding's cached keys go stale (`positions.rotary.GoesStale`)."""
        lengths = (e.stale_beyond() for e in self.encodings if isinstance(e, GoesStale))
        return min((n for n in lengths if n is not None), default=None)

    def stale_at(self, length: int) -> bool:
        """Whether a forward of `length` (largest position + 1) finds an encoding's keys cached by shorter
        forwards stale (`positions.rotary.GoesStale`)."""
        return any(e.stale_at(length) for e in self.encodings if isinstance(e, GoesStale))

    def keys_seen(self) -> KeysSeen | None:
        """Which cached keys a later query may still see, when every encoding of the stack forgets keys
        (`positions.streaming.ForgetsKeys`): a key stays while one of them sees it. None when one keeps every key,
        or when a layer has a sliding window or chunks (its mask counts the cache's slots)."""
        encodings = self.encodings
        if self.reaches != [KeyReach()] or not all(isinstance(e, ForgetsKeys) for e in encodings):
            return None

        def seen(k_pos: Tensor, q_pos: Tensor) -> Tensor:
            return torch.stack([e.keys_seen(k_pos, q_pos) for e in encodings]).any(0)

        return seen

    def _checkpointed(
        self, run: Callable[..., tuple[Tensor, list[Tensor]]], x: Tensor, router_logits: list[Tensor] | None
    ) -> tuple[Tensor, list[Tensor]]:
        """run(x) keeping only x for the backward pass, which runs the block again (`activation_checkpointing`).
        The recomputation sees the encodings' per-forward memo as the block first saw it, so it repeats the same
        operations; the router logits it appends again go to a list nobody reads."""
        holders = self._memo_holders()
        memos = [holder.memo_snapshot() for holder in holders]
        lists = iter([router_logits])

        def again(x: Tensor) -> tuple[Tensor, list[Tensor]]:
            with ExitStack() as scopes:
                for holder, memo in zip(holders, memos):
                    scopes.enter_context(holder.memo_restored(memo))
                logits = next(lists, None if router_logits is None else [])
                return run(x, router_logits=logits)

        return checkpoint(again, x, use_reentrant=False)

    def forward(
        self,
        x: Tensor,
        pos: Tensor,
        masks: dict[KeyReach, AttentionMask],
        cache: Cache | None = None,
        memory: Tensor | None = None,
        memory_mask: AttentionMask | None = None,
        need_weights: bool = False,
        packing: TokenPacking | None = None,
        router_logits: list[Tensor] | None = None,
        ids: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        """x: (B, T, d_model) token embeddings, pos: (B, T), or (3, B, T) with axes for M-RoPE -> hidden states
        (B, T, d_model).

        masks: the self-attention mask for each window and chunk of the stack's layers (`reaches`).
        memory: (B, S, d_model), the encoder output a decoder with cross-attention attends to.
        With a `packing`, the layers between the embeddings and the output run on the real tokens
        only, and the hidden states of padded positions are zeros.
        router_logits: a list each mixture-of-experts layer appends its router's logits to, in layer order:
        (B * T, n_experts), or (N, n_experts) for the real tokens of a `packing`.
        ids: (B, T), the token ids x embeds, which a stack with `Config.per_layer_inputs` needs: it makes each
        layer's own input (B, T, P) from them and x.
        """
        for encoding in self.encodings:
            encoding.check_position_ids(pos)
        per_layer_inputs = None  # (B, T, n_layers, P)
        if self.per_layer_inputs is not None:
            if ids is None:
                raise ValueError("a stack with Config.per_layer_inputs needs the token ids its input x embeds")
            per_layer_inputs = self.per_layer_inputs(ids, x)
        if self.recurrent_layers:  # before any layer runs (and writes to the cache)
            refuse_unsupported(masks[self.layers[self.recurrent_layers[0]].reach], need_weights)
        x = self.position.embed(x, pos)
        if packing is not None:
            x = packing.pack(x)
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        x = self.dropout(x)
        weights: list[Tensor] = []
        with ExitStack() as scopes:
            for holder in self._memo_holders():
                scopes.enter_context(holder.forward_scope())
            checkpointed = self.activation_checkpointing and self.training and torch.is_grad_enabled()
            for i, block in enumerate(self.layers):
                run = partial(
                    block,
                    mask=masks[block.reach],
                    pos=pos,
                    cache=None if cache is None else cache.self_attn[i],
                    memory=memory,
                    memory_mask=memory_mask,
                    memory_cache=None if cache is None else cache.cross_attn[i],
                    need_weights=need_weights,
                    packing=packing,
                    per_layer_input=None if per_layer_inputs is None else per_layer_inputs[:, :, i],
                )
                if checkpointed and cache is None:
                    x, w = self._checkpointed(run, x, router_logits)
                else:
                    x, w = run(x, router_logits=router_logits)
                weights.extend(w)
        if self.norm is not None:
            x = self.norm(x)
        return (x if packing is None else packing.unpack(x)), weights

    if TYPE_CHECKING:  # `stack(x, pos, masks, ...)` is checked as `forward` is
        __call__ = forward
