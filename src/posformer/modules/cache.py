"""KV cache: the keys, values and key positions of earlier steps, per layer, in buffers allocated once.

Shapes: B batch, Hkv key/value heads, S positions filled so far, C capacity
(S <= C), dh head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from posformer.utils.validation import check_int, fail

# keys_seen(k_pos, q_pos): k_pos (B, S) the cached keys' positions, q_pos (B, T) the next queries' -> (B, S) bool,
# whether a query at q_pos or later may still see each key (`positions.streaming.ForgetsKeys`)
KeysSeen = Callable[[Tensor, Tensor], Tensor]


@dataclass
class RecurrentState:
    """What a gated DeltaNet layer (`modules.gated_deltanet`) carries from one call to the next instead of keys:
    conv (B, C, K - 1) the last K - 1 inputs of its causal convolution (C channels, K taps), zeros before the first
    token; memory (B, H, dk, dv) the gated delta rule's state of each head, in float32."""

    conv: Tensor
    memory: Tensor

    def reorder(self, index: Tensor) -> RecurrentState:
        """Select batch rows: index (B',)."""
        return RecurrentState(self.conv.index_select(0, index), self.memory.index_select(0, index))


class LayerCache:
    """One self-attention layer's keys, values and key positions.

    The buffers k, v (B, Hkv, C, dh) and pos (B, C) are allocated at the first
    `append` (with its batch, heads, dtype and device) for `capacity` positions,
    or for that call's positions when no capacity is given; each step is then
    written in place. An append past the capacity moves the filled part into
    buffers of twice the size (or what the step needs, if more).

    `k`, `v` (B, Hkv, S, dh) and `pos` (B, S) are views of the filled part: a
    later `append` or `reorder` may overwrite them, so clone what must outlive
    the next step. Gradients flow into the cache, but not back across steps.

    `last_key` (B, Hkv, 1, dh): the key of the last position given, as projected, before any mix or position
    encoding, for a layer whose keys mix in their predecessor's (`modules.key_smear`); None otherwise.

    `terms` (B, H, S, d): each key's terms of an encoding that reads the hidden states (`positions.forgetting`),
    kept beside the keys when `append` is given them; None otherwise.

    k and v may differ in heads and width: a latent-attention layer (`modules.latent_attention`) keeps its
    rotated shared rope key as k (B, 1, C, r) and its latent as v (B, 1, C, kv_lora_rank).

    `recurrent` (`RecurrentState`): the state of a layer that mixes tokens by a recurrence instead of attention
    (`modules.gated_deltanet`), None before its first call and for every other layer. Such a layer records its
    positions alone (`append_positions`), so that the cache counts, drops and reorders them as every layer's.
    """

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None:
            check_int("capacity", capacity, minimum=0)
        self.capacity = capacity
        self.length = 0
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._pos: Tensor | None = None
        self._terms: Tensor | None = None
        self.last_key: Tensor | None = None
        self.recurrent: RecurrentState | None = None

    def __len__(self) -> int:
        return self.length

    @property
    def k(self) -> Tensor | None:
        return None if self._k is None else self._k[:, :, : self.length]

    @property
    def v(self) -> Tensor | None:
        return None if self._v is None else self._v[:, :, : self.length]

    @property
    def pos(self) -> Tensor | None:
        return None if self._pos is None else self._pos[:, : self.length]

    @property
    def terms(self) -> Tensor | None:
        return None if self._terms is None else self._terms[:, :, : self.length]

    def append(self, k: Tensor, v: Tensor, pos: Tensor, terms: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Write this step's k, v (B, Hkv, T, dh) at positions pos (B, T), and the keys' terms (B, H, T, d) when
        given (every step then gives them); return all of k, v, pos so far."""
        new = k.shape[2]
        if self._k is None:
            self._allocate(k, v, pos, max(new, self.capacity or 0), terms)
        elif k.shape[0] != self._k.shape[0]:
            fail("k.shape[0] (batch)", k.shape[0], f"the cache's batch size {self._k.shape[0]}")
        elif self.length + new > self._k.shape[2]:
            self._grow(max(self.length + new, 2 * self._k.shape[2]))
        if self._terms is not None and terms is None:
            fail("terms", None, "the keys' terms (B, H, T, d), as the cache's first append gave them")
        keys, values, positions = self._buffers()
        end = self.length + new
        keys[:, :, self.length : end] = k
        values[:, :, self.length : end] = v
        positions[:, self.length : end] = pos
        if self._terms is not None and terms is not None:
            self._terms[:, :, self.length : end] = terms
        self.length = end
        return keys[:, :, :end], values[:, :, :end], positions[:, :end]

    def append_positions(self, pos: Tensor) -> None:
        """Record positions pos (B, T) for a layer that keeps no keys (it keeps `recurrent`): keys and values of
        width zero, which hold no memory."""
        empty = pos.new_empty(pos.shape[0], 0, pos.shape[1], 0, dtype=torch.float32)
        self.append(empty, empty, pos)

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search): index (B',); the buffers keep their capacity."""
        if self._k is not None:
            self._k, self._v, self._pos = (buffer.index_select(0, index) for buffer in self._buffers())
        if self._terms is not None:
            self._terms = self._terms.index_select(0, index)
        if self.last_key is not None:
            self.last_key = self.last_key.index_select(0, index)
        if self.recurrent is not None:
            self.recurrent = self.recurrent.reorder(index)

    def keep_slots(self, index: Tensor) -> None:
        """Keep the filled slots `index` (S',) long, increasing, at the front of the buffers; drop the others. A
        layer that keeps nothing (it reads another's keys, `Config.kv_sources`) has no slots to keep."""
        if self._k is None:
            return
        kept = index.numel()
        keys, values, positions = self._buffers()
        keys[:, :, :kept] = keys[:, :, index]
        values[:, :, :kept] = values[:, :, index]
        positions[:, :kept] = positions[:, index]
        if self._terms is not None:
            self._terms[:, :, :kept] = self._terms[:, :, index]
        self.length = kept

    def _allocate(self, k: Tensor, v: Tensor, pos: Tensor, capacity: int, terms: Tensor | None) -> None:
        batch, heads, _, dim = k.shape
        self._k = k.new_empty(batch, heads, capacity, dim)
        self._v = v.new_empty(batch, heads, capacity, v.shape[3])
        self._pos = pos.new_empty(batch, capacity)
        self._terms = None if terms is None else terms.new_empty(batch, terms.shape[1], capacity, terms.shape[3])

    def _buffers(self) -> tuple[Tensor, Tensor, Tensor]:
        """The whole buffers k, v (B, Hkv, C, dh) and pos (B, C), which the first `append` allocates together."""
        if self._k is None or self._v is None or self._pos is None:
            raise RuntimeError("the layer cache holds no buffers before its first append")
        return self._k, self._v, self._pos

    def _grow(self, capacity: int) -> None:
        k, v, pos = self._buffers()
        k, v, pos, terms = k[:, :, : self.length], v[:, :, : self.length], pos[:, : self.length], self.terms
        self._allocate(k, v, pos, capacity, terms)
        keys, values, positions = self._buffers()
        keys[:, :, : self.length] = k
        values[:, :, : self.length] = v
        positions[:, : self.length] = pos
        if terms is not None and self._terms is not None:
            self._terms[:, :, : self.length] = terms


class MemoryCache:
    """One cross-attention layer's keys and values of the encoder output, computed once: (B, Hkv, S, dh)."""

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def set(self, k: Tensor, v: Tensor) -> None:
        self.k, self.v = k, v

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search): index (B',)."""
        if self.k is not None and self.v is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)


class Cache:
    """The KV cache of a whole model: self-attention and (encoder-decoder) cross-attention per layer.

    Pass the same object to successive `Transformer.forward(..., cache=cache)` calls.
    `capacity`: the positions to allocate room for at once (generation passes the
    prefix length + max_new_tokens); None: room for the first call, grown when full.
    For an encoder-decoder model it also keeps the encoder output and its mask.

    `keys_seen` (`KeysSeen`), for an encoding under which old keys fall out of sight (StreamingLLM): before each
    call the cache drops the keys no query of that call or later sees (`make_room`), the same slots in every layer,
    so that it holds a bounded number of keys however long the decoding. `len(cache)` counts the keys held,
    `seen` every position given to it.

    `next_axes_position` (B,): once a call gave ids with axes (M-RoPE, (3, B, T)), the largest position given so
    far, over every axis, plus one: where a later call without position ids goes on, as Hugging Face's rope
    deltas do (`Transformer.decode`). None until then.
    """

    def __init__(self, n_layers: int, capacity: int | None = None, keys_seen: KeysSeen | None = None) -> None:
        check_int("n_layers", n_layers)
        self.self_attn = [LayerCache(capacity) for _ in range(n_layers)]
        self.cross_attn = [MemoryCache() for _ in range(n_layers)]
        self.encoder_hidden: Tensor | None = None
        self.encoder_mask: Tensor | None = None
        self.keys_seen = keys_seen
        self.dropped = 0
        self._columns: Tensor | None = None  # (S,): the index among the positions given of each slot held
        self.next_axes_position: Tensor | None = None

    def __len__(self) -> int:
        """How many positions the self-attention cache holds."""
        return len(self.self_attn[0])

    @property
    def seen(self) -> int:
        """How many positions have been given to the cache: those it holds and those it dropped."""
        return len(self) + self.dropped

    def make_room(self, pos: Tensor, keep: Tensor | None) -> Tensor | None:
        """Before a call on new positions pos (B, T): drop the slots that `keys_seen` says no query at pos or later
        sees. keep: the padding mask (B, seen + T) of every position given and the new ones, or None -> its columns
        of the slots held and the new positions, (B, len + T), or None."""
        layer = self.self_attn[0]
        if self.keys_seen is not None and layer.pos is not None:
            seen = self.keys_seen(layer.pos, pos).any(0)  # (S,): a slot stays while any row may see it
            if not bool(seen.all()):
                index = seen.nonzero().squeeze(-1)
                self._columns = self._held(pos.device)[index]
                self.dropped += len(self) - index.numel()
                for cache in self.self_attn:
                    cache.keep_slots(index)
        if keep is None or self._columns is None:
            return keep
        return keep[:, self._held(keep.device, pos.shape[1])]

    def _held(self, device: torch.device, new: int = 0) -> Tensor:
        """The index among the positions given of each slot held, then of `new` positions to come: (S + new,).
        The slots appended since the last drop follow on from the positions dropped."""
        kept = 0 if self._columns is None else self._columns.numel()
        after = torch.arange(kept + self.dropped, self.seen + new, device=device)
        return after if self._columns is None else torch.cat((self._columns.to(device), after))

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search) of every layer and of the encoder output: index (B',)."""
        for layer in self.self_attn + self.cross_attn:
            layer.reorder(index)
        if self.encoder_hidden is not None:
            self.encoder_hidden = self.encoder_hidden[index]
        if self.encoder_mask is not None:
            self.encoder_mask = self.encoder_mask[index]
        if self.next_axes_position is not None:
            self.next_axes_position = self.next_axes_position[index]

    def record_axes(self, pos: Tensor) -> None:
        """After a call at ids with axes pos (3, B, T): keep the largest position so far + 1 (`next_axes_position`)."""
        following = pos.amax(dim=(0, 2)) + 1
        last = self.next_axes_position
        self.next_axes_position = following if last is None else torch.maximum(last, following)
