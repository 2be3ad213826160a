"""`Transformer`: embeddings, one or two stacks of `Block`s, and a head.

Encoder, decoder and encoder-decoder differ only in masks and in whether a
block has cross-attention.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.familiar_names import FamiliarNames
from posformer.generation import GenerationConfig, generate
from posformer.modules.cache import Cache
from posformer.modules.head_outputs import (
    HeadOutput,
    apply_head,
    aux_loss,
    check_head_options,
    copy_or_generate,
    refuse_unused,
    with_encoder_span_loss,
)
from posformer.modules.heads import SpanQAHead, build_head
from posformer.modules.init import deepnorm_alphas, deepnorm_init_, normal_init_, t5_init_
from posformer.modules.model_inputs import input_positions, packed_documents, padding_keep
from posformer.modules.moe import MoEFeedForward
from posformer.modules.outputs import ModelOutput
from posformer.modules.pointer_generator import PointerGenerator
from posformer.modules.shift_right import shift_right
from posformer.modules.sink_tokens import SinkTokens
from posformer.modules.stack import Stack
from posformer.ops.masks import build_mask, reach_masks
from posformer.ops.packing import TokenPacking
from posformer.pretrained import Pretrained
from posformer.utils.tensor_checks import check_in_range, check_shape, check_token_ids


class Transformer(Pretrained, FamiliarNames, nn.Module):
    """The model `cfg` describes. See `forward` for inputs and `ModelOutput` for outputs.

    Token (and token-type) embeddings `embed_tokens` (`token_types`) feed both stacks; with
    `Config.separate_decoder_embeddings` the decoder has its own, `decoder_embed_tokens`
    (`decoder_token_types`). A tied LM head shares the weight of the decoder's token embeddings.

    `forward`'s inputs, beyond their shapes (in its docstring):
    - document_ids: packed documents (an encoder's or a decoder's, without a cache): each document is a run of
      equal ids, attends only within itself, and its default positions restart at 0; a causal LM's labels at each
      document's first token are ignored, so that no document predicts from another. Each document's logits and
      gradients are then those it has alone (`data.packing` packs rows so).
    - cache: a decoder with a cache takes the new tokens only, an attention_mask over cached + new positions,
      and the `Cache` of the previous output (`use_cache` starts one).
    - start_positions, end_positions: the span_qa head's answer tokens; for an encoder-decoder with
      `Config.encoder_span_loss`, the answer tokens of the encoder's input, whose span loss it adds.
    - logits_to_keep: n > 0 applies a language-model head to the last n positions only (logits (B, n, V)), as
      Hugging Face's `logits_to_keep`: generation's prompt pass needs one; 0 keeps every position.
    - return_logits: False (with labels, for a language-model head) returns the loss alone, logits None: it is
      computed a chunk of rows at a time (`linear_token_cross_entropy`), so the (B, T, V) logits and their
      gradient are never held. Training needs nothing else.
    An input this model has no use for (decoder inputs outside an encoder-decoder, span positions outside the
    span_qa head, labels for the span_qa or "none" head, token types without token-type embeddings) is refused,
    never ignored. A model with mixture-of-experts layers returns their load-balancing loss as `aux_loss`, and
    while training adds `Config.router_aux_loss_coef` times it to `loss` (evaluation losses stay the head's own).
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.generation_config = GenerationConfig()  # generate's defaults: generation_config.json
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.token_types = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        if cfg.separate_decoder_embeddings:
            self.decoder_embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.decoder_token_types = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        alphas = deepnorm_alphas(cfg)
        if cfg.arch in ("encoder", "encoder_decoder"):
            self.encoder = Stack(cfg, cfg.n_layers, causal=False, cross=False, alpha=alphas["encoder"][0])
        if cfg.arch in ("decoder", "encoder_decoder"):
            self.decoder = Stack(
                cfg, cfg.decoder_layers, causal=True, cross=cfg.arch == "encoder_decoder", alpha=alphas["decoder"][0]
            )
        self.sink_tokens = SinkTokens(cfg.sink_tokens, cfg.d_model) if cfg.sink_tokens else None
        self.head = build_head(cfg)
        self.pointer_generator = PointerGenerator(cfg.d_model) if cfg.pointer_generator else None
        self.encoder_span = SpanQAHead(cfg) if cfg.encoder_span_loss else None
        self.has_experts = any(isinstance(m, MoEFeedForward) for m in self.modules())
        self.apply(self._init_weights)
        if cfg.norm == "deepnorm":
            deepnorm_init_(self, alphas)
        self.tie_head()
        if cfg.init == "t5":
            t5_init_(self)

    def _init_weights(self, module: nn.Module) -> None:
        """The "normal" scheme (`posformer.modules.init`), which every `Config.init` starts from."""
        normal_init_(module, self.cfg.init_std)

    def token_embeddings(self, stack: str = "encoder") -> tuple[nn.Embedding, nn.Embedding | None]:
        """The (token, token-type) embeddings that feed `stack`, "encoder" or "decoder" (the type
        embedding is None without `Config.type_vocab_size`)."""
        if stack == "decoder" and self.cfg.separate_decoder_embeddings:
            return self.decoder_embed_tokens, self.decoder_token_types
        return self.embed_tokens, self.token_types

    def embeddings(self) -> list[nn.Embedding]:
        """Every token and token-type embedding of the model (the decoder's own ones included)."""
        found = [self.embed_tokens, self.token_types]
        if self.cfg.separate_decoder_embeddings:
            found += [self.decoder_embed_tokens, self.decoder_token_types]
        return [m for m in found if m is not None]

    def tie_head(self) -> None:
        """With `Config.tie_embeddings`, share the LM head's projection weight with the decoder's token
        embeddings (the only token embeddings of an encoder or a decoder model)."""
        words = self.token_embeddings("decoder")[0]
        proj = getattr(self.head, "proj", None)
        if self.cfg.tie_embeddings and isinstance(proj, nn.Linear) and proj.weight.shape == words.weight.shape:
            proj.weight = words.weight

    def _embed(self, ids: Tensor, token_type_ids: Tensor | None = None, stack: str = "encoder") -> Tensor:
        """(B, T) ids -> (B, T, d_model): the token embeddings of `stack`, plus its token-type embeddings."""
        words, types = self.token_embeddings(stack)
        x: Tensor = words(ids) * self.embed_scale
        if types is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(ids)
            else:
                check_shape(token_type_ids, "token_type_ids", (ids.shape[0], ids.shape[1]), integers=True)
                check_in_range(
                    token_type_ids,
                    0,
                    self.cfg.type_vocab_size,
                    f"token_type_ids must hold values in [0, {self.cfg.type_vocab_size})",
                )
            x = x + types(token_type_ids)
        return x

    def encode(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        output_attentions: bool = False,
        router_logits: list[Tensor] | None = None,
        documents: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        """Run the encoder stack: (B, S) ids -> (B, S, d_model). Its mixture-of-experts layers append their
        router's logits for the real tokens to `router_logits` when given (`Stack.forward`). documents: (B, S)
        packed documents (see `forward`)."""
        check_token_ids(input_ids, "input_ids", self.cfg.vocab_size)
        batch, length = input_ids.shape
        keep = padding_keep(attention_mask, batch, length, "attention_mask")
        pos = input_positions(self.cfg, self.training, position_ids, input_ids, 0, documents)
        x = self._embed(input_ids, token_type_ids)
        masks = reach_masks(self.encoder.reaches, keep, False, length, length, x.dtype, x.device, documents)
        return self.encoder(
            x,
            pos,
            masks,
            need_weights=output_attentions,
            packing=TokenPacking.of(keep),
            router_logits=router_logits,
        )

    def decode(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: Cache | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        output_attentions: bool = False,
        router_logits: list[Tensor] | None = None,
        documents: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        """Run the decoder stack on (B, T) ids after the `cache.seen` positions given to the cache -> (B, T, d_model).

        attention_mask covers the cached positions too: (B, cache.seen + T). A cache that drops keys no query
        sees any more (`Cache.make_room`) holds fewer, `len(cache)`, and the mask is narrowed to them. Sink tokens
        (`Config.sink_tokens`) are not counted in the mask or the positions: they lead on the first call and stay
        cached, and their outputs are dropped.
        """
        check_token_ids(input_ids, "decoder input_ids", self.cfg.vocab_size)
        batch, length = input_ids.shape
        sinks = self.cfg.sink_tokens
        cached = 0 if cache is None else cache.seen
        past = max(cached - sinks, 0)
        keep = padding_keep(attention_mask, batch, past + length, "attention_mask (cached + new positions)")
        pos = input_positions(self.cfg, self.training, position_ids, input_ids, past, documents, cache)
        x = self._embed(input_ids, stack="decoder")
        if self.sink_tokens is not None:
            x, pos, keep = self.sink_tokens.lead(x, pos, keep, first_call=cached == 0)
        if cache is not None:
            keep = cache.make_room(pos, keep)
        length = x.shape[1]
        keys = length + (0 if cache is None else len(cache))
        masks = reach_masks(self.decoder.reaches, keep, True, length, keys, x.dtype, x.device, documents)
        memory_attn = None
        if memory is not None:
            if memory.shape[0] != batch:
                raise ValueError(
                    f"decoder input_ids have batch {batch}; expected the encoder input's batch, {memory.shape[0]}"
                )
            src = memory.shape[1]
            memory_keep = padding_keep(memory_mask, batch, src, "encoder attention_mask")
            memory_attn = build_mask(memory_keep, False, length, src, x.dtype, x.device)
        hidden, attentions = self.decoder(
            x, pos, masks, cache, memory, memory_attn, output_attentions, router_logits=router_logits, ids=input_ids
        )
        return hidden[:, length - input_ids.shape[1] :], attentions

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        decoder_input_ids: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        decoder_position_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool = False,
        output_attentions: bool = False,
        logits_to_keep: int = 0,
        return_logits: bool = True,
        document_ids: Tensor | None = None,
    ) -> ModelOutput:
        """input_ids: (B, T) token ids; attention_mask: (B, T), 1 for tokens, 0 for padding; position_ids: (B, T),
        default 0.. T-1 (after any cached positions); labels: (B, T) token labels (-100 ignored), or (B,) class
        labels; start_positions, end_positions: (B,) answer tokens (span_qa head, `Config.encoder_span_loss`);
        document_ids: (B, T) packed documents; cache, use_cache: KV-cached decoding; decoder_*: the
        encoder-decoder's decoder inputs (default: labels shifted right); logits_to_keep: n > 0 keeps the last n
        positions' LM logits; return_logits=False: the LM loss alone. The class docstring says more of each."""
        cfg = self.cfg
        refuse_unused(
            cfg,
            token_type_ids=token_type_ids,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            decoder_position_ids=decoder_position_ids,
            start_positions=start_positions,
            end_positions=end_positions,
            labels=labels,
        )
        check_head_options(cfg, logits_to_keep, return_logits, labels)
        if use_cache and cache is None and cfg.arch != "encoder":
            cache = self.new_cache()
        stack = self.decoder if cfg.arch == "decoder" else getattr(self, "encoder", None)
        documents, labels = packed_documents(cfg, stack, document_ids, input_ids, labels, cache)
        decoder_input_ids = self._decoder_inputs(decoder_input_ids, labels)
        routers: tuple[list[Tensor] | None, list[Tensor] | None] = ([], []) if self.has_experts else (None, None)
        source = (input_ids, attention_mask, position_ids, token_type_ids)
        target = (decoder_input_ids, decoder_attention_mask, decoder_position_ids)
        hidden, memory, attentions, source_mask = self._stacks(
            source, target, cache, output_attentions, routers, documents
        )
        head_input = hidden[:, -logits_to_keep:] if logits_to_keep else hidden
        decoder_ids = input_ids if decoder_input_ids is None else decoder_input_ids
        source_ids = (input_ids, source_mask, decoder_ids)
        head = self._head(head_input, memory, source_ids, labels, (start_positions, end_positions), return_logits)
        balance, loss = self._aux_loss(head.loss, routers, (attention_mask, decoder_attention_mask), decoder_ids)
        return ModelOutput(
            logits=head.logits,
            loss=loss,
            aux_loss=balance,
            last_hidden_state=hidden,
            encoder_last_hidden_state=memory,
            start_logits=head.start_logits,
            end_logits=head.end_logits,
            cache=cache,
            attentions=attentions,
        )

    def _decoder_inputs(self, decoder_input_ids: Tensor | None, labels: Tensor | None) -> Tensor | None:
        """An encoder-decoder's decoder inputs: those given, else `labels` shifted right (teacher forcing)."""
        if self.cfg.arch != "encoder_decoder" or decoder_input_ids is not None:
            return decoder_input_ids
        if labels is None:
            raise ValueError("an encoder_decoder model needs decoder_input_ids or labels")
        return self.shift_right(labels)

    def _stacks(
        self,
        source: tuple[Tensor, Tensor | None, Tensor | None, Tensor | None],
        target: tuple[Tensor | None, Tensor | None, Tensor | None],
        cache: Cache | None,
        output_attentions: bool,
        routers: tuple[list[Tensor] | None, list[Tensor] | None],
        documents: Tensor | None,
    ) -> tuple[Tensor, Tensor | None, list[Tensor], Tensor | None]:
        """Run the model's stacks: (hidden (B, T, d_model) of the last one, the encoder's output (B, S, d_model)
        of an encoder-decoder or None, attention weights, the encoder input's mask). source: the encoder's (a
        decoder's) ids, mask, positions and token types; target: an encoder-decoder's decoder ids, mask,
        positions; routers: the lists the encoder's and the decoder's routers append their logits to."""
        ids, mask, positions, types = source
        arch = self.cfg.arch
        if arch == "encoder":
            hidden, attentions = self.encode(ids, mask, positions, types, output_attentions, routers[0], documents)
            return hidden, None, attentions, mask
        if arch == "decoder":
            hidden, attentions = self.decode(
                ids,
                mask,
                positions,
                cache,
                output_attentions=output_attentions,
                router_logits=routers[1],
                documents=documents,
            )
            return hidden, None, attentions, mask
        if cache is not None and cache.encoder_hidden is not None:
            memory, mask, attentions = cache.encoder_hidden, cache.encoder_mask, []
        else:
            memory, attentions = self.encode(ids, mask, positions, types, output_attentions, routers[0])
            if cache is not None:
                cache.encoder_hidden, cache.encoder_mask = memory, mask
        decoder_ids, decoder_mask, decoder_positions = target
        if decoder_ids is None:
            raise ValueError("an encoder_decoder model needs decoder_input_ids or labels")
        hidden, weights = self.decode(
            decoder_ids, decoder_mask, decoder_positions, cache, memory, mask, output_attentions, routers[1]
        )
        return hidden, memory, attentions + weights, mask

    def _head(
        self,
        hidden: Tensor,
        memory: Tensor | None,
        source: tuple[Tensor, Tensor | None, Tensor],
        labels: Tensor | None,
        spans: tuple[Tensor | None, Tensor | None],
        return_logits: bool,
    ) -> HeadOutput:
        """The head's logits and loss for the last stack's `hidden`: the pointer-generator's mixture when the model
        has one (source: encoder ids, their mask, decoder ids), else the head's own; spans: the answers' start and
        end positions (B,), of the span head or of the encoder's span loss (`Config.encoder_span_loss`) that an
        encoder-decoder adds, on the encoder's output `memory`."""
        if self.pointer_generator is not None:
            head = copy_or_generate(self, hidden, memory, source, labels, return_logits)
        elif self.head is None:  # head "none": hidden states alone (`check_head_options` wants return_logits)
            head = HeadOutput()
        else:
            encoder_mask = source[1] if self.cfg.arch == "encoder" else None
            head = apply_head(self.head, self.cfg, hidden, labels, *spans, encoder_mask, return_logits)
        if self.encoder_span is not None and (spans[0] is not None or spans[1] is not None):
            head = with_encoder_span_loss(self, head, memory, source[1], *spans)
        return head

    def _aux_loss(
        self,
        loss: Tensor | None,
        routers: tuple[list[Tensor] | None, list[Tensor] | None],
        masks: tuple[Tensor | None, Tensor | None],
        decoder_ids: Tensor,
    ) -> tuple[Tensor | None, Tensor | None]:
        """(aux_loss, loss): the experts' load-balancing loss and `loss` with its share added while training
        (`head_outputs.aux_loss`); (None, loss) without experts. masks: the attention masks of the input and the
        decoder's input; decoder_ids: the (B, T) ids the decoder ran on."""
        encoder, decoder = routers
        if not self.has_experts or encoder is None or decoder is None:
            return None, loss
        decoder_mask = {"decoder": masks[0], "encoder_decoder": masks[1]}.get(self.cfg.arch)
        return aux_loss(self.cfg, self.training, loss, encoder, decoder, decoder_mask, decoder_ids.shape[1])

    def shift_right(self, labels: Tensor) -> Tensor:
        """Decoder inputs for teacher forcing: labels (B, T) -> (B, T); see `modules.shift_right`."""
        return shift_right(labels, self.cfg)

    def set_activation_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them (`Stack`): training
        memory then grows with the number of layers times one (B, T, d_model) input each, for about a third more
        compute. Identical losses and gradients; no effect in eval mode or under no_grad."""
        for name in ("encoder", "decoder"):
            if hasattr(self, name):
                getattr(self, name).activation_checkpointing = enabled

    def new_cache(self, capacity: int | None = None) -> Cache:
        """An empty KV cache for the decoder, with room for `capacity` positions at once (None: grown as needed).
        When the decoder's encoding says which keys no later query sees (StreamingLLM), the cache drops them and
        its memory stays bounded however long the decoding; it then ignores `capacity`."""
        keys_seen = self.decoder.keys_seen()
        return Cache(len(self.decoder.layers), None if keys_seen is not None else capacity, keys_seen)

    generate = generate  # `posformer.generation.generate` itself: help(model.generate) shows its signature and doc
    if TYPE_CHECKING:  # `model(input_ids, ...)` is checked as `forward` is, and gives a `ModelOutput`
        __call__ = forward

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
