"""`Decoding`: the incremental state of a batch being decoded over the KV cache."""

from __future__ import annotations

import torch
from torch import Tensor

from posformer import positions
from posformer.utils.validation import check_token_in_vocabulary

PREALLOCATED_NEW_TOKENS = 4096  # room made at once for new tokens; the cache grows past it


def initial_room(max_new_tokens: int) -> int:
    """The new tokens a buffer of a decoding (the KV cache, beam search's finished hypotheses) makes room for at
    once: `max_new_tokens`, at most `PREALLOCATED_NEW_TOKENS`; past them the buffer grows."""
    return min(max_new_tokens, PREALLOCATED_NEW_TOKENS)


class Decoding:
    """The incremental decoding state of a batch: model, KV cache, attention mask and positions.

    `tokens` is the fixed prefix every continuation follows: the prompt (B, T)
    for a decoder, the start token (B, 1) for an encoder-decoder. `start()` runs
    the prefix (and the encoder) once; `step(new)` feeds one token per row;
    `reorder(index)` selects rows (beam search) in the cache and in the state.
    The cache is allocated once for the prefix and `max_new_tokens` more tokens, at most `PREALLOCATED_NEW_TOKENS`
    of them: past those it grows (doubling), so a large max_new_tokens (a generation_config.json may say 2**31 - 1)
    allocates only what the decoding reaches. When a step takes a decoder to a length at which its encoding's
    cached keys are stale (`positions.rotary.GoesStale`: LongRoPE switching to its long factors, once; dynamic
    YaRN past its fixed length, at every step), the whole sequence is run again into a fresh cache (Hugging Face's
    Phi-3 drops its cache there too), so every step's logits are those of a full pass; only such a decoder keeps
    every token so far (`sequence`).
    """

    def __init__(
        self,
        model,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        max_new_tokens: int,
        position_ids: Tensor | None = None,
    ) -> None:
        self.model = model
        self.cfg = cfg = model.cfg
        self.source = input_ids
        batch = input_ids.shape[0]
        if cfg.arch == "decoder":
            self.mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
            self.pos = (self.mask.cumsum(-1) - 1).clamp(min=0) if position_ids is None else position_ids.long()
            self.tokens = self.sequence = input_ids
            self.stale_beyond = model.decoder.stale_beyond()
        else:
            check_token_in_vocabulary(
                "Config.decoder_start_token_id",
                cfg.decoder_start_token_id,
                cfg.vocab_size,
                "encoder-decoder generation starts every output with it",
            )
            self.source_mask = attention_mask
            self.tokens = input_ids.new_full((batch, 1), cfg.decoder_start_token_id)
            self.length = 1
        self.capacity = self.tokens.shape[1] + initial_room(max_new_tokens)
        self.cache = model.new_cache(self.capacity)

    def start(self) -> Tensor:
        """Run the prefix; the next-token logits (B, V) in float32."""
        if self.cfg.arch == "decoder":
            out = self.model(
                self.tokens, attention_mask=self.mask, position_ids=self.pos, cache=self.cache, logits_to_keep=1
            )
        else:
            out = self.model(
                self.source, attention_mask=self.source_mask, decoder_input_ids=self.tokens, cache=self.cache
            )
        return out.logits[:, -1].float()

    def step(self, new: Tensor) -> Tensor:
        """Feed one new token per row, new: (B,); the next-token logits (B, V) in float32."""
        new = new[:, None]
        if self.cfg.arch == "decoder":
            self.mask = torch.cat((self.mask, self.mask.new_ones(new.shape)), dim=1)
            self.pos = self._next_positions()
            if self.stale_beyond is not None:
                self.sequence = torch.cat((self.sequence, new), dim=1)
            if self.stale_beyond is not None and self.model.decoder.stale_at(
                int(self.pos.max()) + 1 + self.cfg.sink_tokens
            ):
                self.cache = self.model.new_cache(self.capacity)
                every = (self.mask.cumsum(-1) - 1).clamp(min=0)
                out = self.model(
                    self.sequence, attention_mask=self.mask, position_ids=every, cache=self.cache, logits_to_keep=1
                )
            else:
                out = self.model(new, attention_mask=self.mask, position_ids=self.pos, cache=self.cache)
        else:
            out = self.model(
                self.source,
                decoder_input_ids=new,
                cache=self.cache,
                decoder_position_ids=torch.full_like(new, self.length),
            )
            self.length += 1
        return out.logits[:, -1].float()

    def _next_positions(self) -> Tensor:
        """The position ids of one new token per row: the last one's + 1, (B, 1); after ids with axes (M-RoPE),
        the largest position so far on any axis + 1, on all three, (3, B, 1) (`Cache.next_axes_position`)."""
        if self.pos.dim() == 3:
            return positions.continued_axes(self.cache.next_axes_position, 1)
        return self.pos[:, -1:] + 1

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` (B',) of the batch, in that order, in the cache and the decoding state."""
        self.cache.reorder(index)
        self.source = self.source[index]
        if self.cfg.arch == "decoder":
            self.mask, self.sequence = self.mask[index], self.sequence[index]
            self.pos = self.pos[:, index] if self.pos.dim() == 3 else self.pos[index]
        self.tokens = self.tokens[index]
