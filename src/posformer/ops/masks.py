"""Attention masks: key padding, causal order, sliding windows, chunks and padded queries, combined once per forward.

A mask is held as its rule (`MaskRule`: which keys each query sees, O(B Tk)) and made a tensor only for a kernel
that asks for one (`AttentionMask.additive`, `AttentionMask.rows`); FlexAttention reads the rule as a block mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor


class KeyReach(NamedTuple):
    """How far a layer's queries reach: a sliding `window` W of slots (a causal layer's last W, itself included; a
    bidirectional layer's keys fewer than W slots away on either side) and/or, causal only, a `chunk` (Llama 4's
    chunked attention: only the keys of the query's own chunk of `chunk` tokens); None for no such limit. The
    layers of a stack that share one share a mask."""

    window: int | None = None
    chunk: int | None = None


@dataclass(frozen=True, eq=False)
class MaskRule:
    """Which keys each of q_len queries sees among k_len keys: key j of batch row b is seen by query i when
    key_keep[b, j] (every key when key_keep is None) and, when causal, offset + i - window < j <= offset + i with
    offset = k_len - q_len, the keys before the first query (a cache); no lower bound without a window. Not
    causal, a window W keeps |offset + i - j| < W (ModernBERT's local layers). With a
    `chunk` C, also (j - lead_b) // C == (offset + i - lead_b) // C, lead_b the left pads of row b (the slots
    before its first kept key): chunks count from each row's first real token, as transformers 4.57.6's
    `chunked_overlay` counts them. With `documents`, also documents[b, j] == documents[b, offset + i]: packed
    documents never see each other (a block-diagonal mask); each document is a run of equal ids.

    key_keep: (B, Tk) bool or None. documents: (B, Tk) int or None.
    """

    q_len: int
    k_len: int
    device: torch.device
    key_keep: Tensor | None = None
    causal: bool = False
    window: int | None = None
    chunk: int | None = None
    documents: Tensor | None = None

    @property
    def offset(self) -> int:
        return self.k_len - self.q_len

    def lead(self) -> Tensor:
        """(B, 1) the left pads of each row, or (1, 1) zeros without key_keep."""
        if self.key_keep is None:
            return torch.zeros(1, 1, dtype=torch.long, device=self.device)
        return (self.key_keep.long().cumsum(-1) == 0).sum(-1, keepdim=True)

    def chunk_start(self, slots: Tensor) -> Tensor:
        """slots (T,) -> (B or 1, T): the first slot of each slot's chunk in each row (requires `chunk`)."""
        lead = self.lead()
        return lead + torch.div(slots[None] - lead, self.chunk, rounding_mode="floor") * self.chunk

    def document_bounds(self, slots: Tensor) -> tuple[Tensor, Tensor]:
        """slots (T,) -> (first, last): (B, T) the first and last slot of the document each slot is in."""
        starts, ends = document_runs(self.documents)
        return starts[:, slots], ends[:, slots]

    def allowed(self, start: int, end: int, keys: int) -> Tensor:
        """Whether queries [start, end) see each of the first `keys` keys: (B or 1, 1, end - start, keys) bool,
        or (B, 1, 1, keys) when every query sees the same keys (no causal order, no window)."""
        keep = None if self.key_keep is None else self.key_keep[:, None, None, :keys]
        if self.documents is not None:
            same = self.documents[:, start + self.offset : end + self.offset, None] == self.documents[:, None, :keys]
            keep = same[:, None] if keep is None else keep & same[:, None]
        if not self.causal and self.window is None:
            return torch.ones(1, 1, 1, keys, dtype=torch.bool, device=self.device) if keep is None else keep
        if not self.causal:  # a window on both sides of each query
            rows = torch.arange(start, end, device=self.device)[:, None] + self.offset
            near = (torch.arange(keys, device=self.device) - rows).abs() < self.window
            return near[None, None] if keep is None else near[None, None] & keep
        last = torch.arange(start, end, device=self.device)[:, None] + self.offset  # each query's last key
        cols = torch.arange(keys, device=self.device)
        allowed = cols <= last
        if self.window is not None:
            allowed = allowed & (cols > last - self.window)
        allowed = allowed[None, None]
        if self.chunk is not None:  # (B or 1, 1, rows, keys): from the first key of the query's chunk on
            allowed = allowed & (cols >= self.chunk_start(last[:, 0])[:, None, :, None])
        return allowed if keep is None else allowed & keep

    def query_keep(self) -> Tensor | None:
        """(B, Tq) bool: whether each query sees any key; None when every query does (synchronises the host once).
        From a running count of the kept keys, O(B Tk)."""
        if self.key_keep is None:
            return None
        before = F.pad(self.key_keep.long().cumsum(-1), (1, 0))  # (B, Tk + 1): the kept keys before key j
        rows = before.shape[0]
        slots = torch.arange(self.q_len, device=self.device) + self.offset
        if not self.causal:
            first, last = torch.zeros_like(slots)[None], torch.full_like(slots, self.k_len - 1)[None]
            if self.window is not None:
                first = (slots - self.window + 1).clamp(min=0)[None]
                last = (slots + self.window - 1).clamp(max=self.k_len - 1)[None]
            if self.documents is not None:
                starts, ends = self.document_bounds(slots)
                first, last = torch.maximum(first, starts), torch.minimum(last, ends)
        else:
            last = slots[None]
            first = torch.zeros_like(slots) if self.window is None else (slots - self.window + 1).clamp(min=0)
            first = first[None]
            if self.chunk is not None:
                first = torch.maximum(first, self.chunk_start(slots)).clamp(min=0)
            if self.documents is not None:
                first = torch.maximum(first, self.document_bounds(slots)[0])
        seen = before.gather(1, (last + 1).expand(rows, -1)) - before.gather(1, first.expand(rows, -1))
        keep = seen > 0
        return None if bool(keep.all()) else keep


@dataclass
class AttentionMask:
    """What one attention call may attend to.

    rule: which keys each query sees (`MaskRule`), or None when every query sees every key.
    is_causal: a plain causal mask with Tq == Tk and nothing else (the SDPA fast path); its rule says so too.
    query_keep: (B, Tq) bool, False for padded queries whose output is zeroed, or None.
    dtype: the dtype of the tensor forms (`additive`, `rows`, `materialized`).
    kernel_memo: what a kernel derives from the mask once for all the layers of a forward (FlexAttention's block
      mask), by key.
    """

    rule: MaskRule | None = None
    is_causal: bool = False
    query_keep: Tensor | None = None
    dtype: torch.dtype = torch.float32
    kernel_memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    _additive: Tensor | None = field(default=None, repr=False, compare=False)
    _with_last_bias: tuple[Tensor, Tensor] | None = field(default=None, repr=False, compare=False)

    @property
    def additive(self) -> Tensor | None:
        """(B or 1, 1, Tq or 1, Tk) with 0 where allowed and the dtype's most negative finite value where not, or
        None when nothing is masked beyond `is_causal`; made on first use. Finite, so a row with nothing to attend
        to gives a uniform (not NaN) distribution, and that row is then zeroed by `query_keep`."""
        if self.rule is None or self.is_causal:
            return None
        if self._additive is None:
            self._additive = additive_of(self.rule.allowed(0, self.rule.q_len, self.rule.k_len), self.dtype)
        return self._additive

    def materialized(self, q_len: int, k_len: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The mask as an additive tensor, the causal part included (for the eager path and biases)."""
        if not self.is_causal:
            return self.additive
        return causal_additive(q_len, k_len, dtype, device)

    def rows(self, start: int, end: int, keys: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The additive mask of queries [start, end) over the first `keys` keys, (B or 1, 1, end - start or 1,
        keys), or None: for attention in blocks of queries, made for the block alone. Under a plain causal mask the
        block's queries are the last `end - start` of the first `end` keys, so `keys` must be `end` then."""
        if self.is_causal and keys != end:
            raise ValueError(f"a causal block of queries [{start}, {end}) reads keys [0, {end}), not {keys}")
        if self.rule is None:
            return None
        return additive_of(self.rule.allowed(start, end, keys), dtype)

    def zero_dropped_queries(self, out: Tensor) -> Tensor:
        """out: (B, H, Tq, dh) with the rows of the queries `query_keep` drops set to zero."""
        return out if self.query_keep is None else out * self.query_keep[:, None, :, None].to(out.dtype)

    def with_bias(self, bias: Tensor, dtype: torch.dtype) -> Tensor:
        """bias: (B or 1, H, Tq, Tk) in `dtype`, with every masked pair set to the mask's value there;
        contiguous.

        The last result is kept: layers that share one bias tensor (a bias computed once per forward)
        combine it with the mask once.
        """
        last = self._with_last_bias
        if last is not None and last[0] is bias and last[1].dtype == dtype:
            return last[1]
        additive = self.materialized(bias.shape[-2], bias.shape[-1], dtype, bias.device)
        combined = bias.to(dtype) if additive is None else torch.where(additive < 0, additive, bias.to(dtype))
        # SDPA's fused CUDA kernels take a mask whose keys are contiguous; a bias laid out (B, T, S, H) and
        # permuted (T5's table lookup, FIRE's MLP) would otherwise send it to the unfused math kernel
        combined = combined.contiguous()
        self._with_last_bias = (bias, combined)
        return combined


def document_runs(documents: Tensor) -> tuple[Tensor, Tensor]:
    """documents (B, T) ids, each document a run of equal ids -> (first, last): (B, T) the first and last slot of
    the run each slot is in."""
    slots = torch.arange(documents.shape[1], device=documents.device).expand_as(documents)
    starts_here = F.pad(documents[:, 1:] != documents[:, :-1], (1, 0), value=True)
    ends_here = F.pad(documents[:, 1:] != documents[:, :-1], (0, 1), value=True)
    first = torch.where(starts_here, slots, torch.zeros_like(slots)).cummax(-1).values
    last_from_end = torch.where(ends_here, slots, torch.full_like(slots, documents.shape[1])).flip(-1)
    return first, (-(-last_from_end).cummax(-1).values).flip(-1)


def document_starts(documents: Tensor) -> Tensor:
    """documents (B, T) -> (B, T) bool: whether each token is its document's first (the row's first token too)."""
    return F.pad(documents[:, 1:] != documents[:, :-1], (1, 0), value=True)


def document_positions(documents: Tensor) -> Tensor:
    """documents (B, T) -> (B, T) each token's position within its document: 0 at each document's first token."""
    first, _ = document_runs(documents)
    return torch.arange(documents.shape[1], device=documents.device) - first


def additive_of(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """allowed (bool, any shape) -> 0 where True, the dtype's most negative finite value where False."""
    return torch.zeros((), dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


def causal_allowed(q_len: int, k_len: int, device: torch.device, window: int | None = None) -> Tensor:
    """(Tq, Tk) bool: query i, the (k_len - q_len + i)-th token, sees keys j <= k_len - q_len + i; with a
    sliding `window` W only the last W of them, j > k_len - q_len + i - W."""
    return MaskRule(q_len, k_len, device, causal=True, window=window).allowed(0, q_len, k_len)[0, 0]


def causal_additive(
    q_len: int, k_len: int, dtype: torch.dtype, device: torch.device, window: int | None = None
) -> Tensor:
    """(1, 1, Tq, Tk) additive causal mask (within a sliding `window` when one is given)."""
    return additive_of(causal_allowed(q_len, k_len, device, window), dtype)[None, None]


def build_mask(
    key_keep: Tensor | None,
    causal: bool,
    q_len: int,
    k_len: int,
    dtype: torch.dtype,
    device: torch.device,
    window: int | None = None,
    chunk: int | None = None,
    documents: Tensor | None = None,
) -> AttentionMask:
    """Combine a key padding mask (B, Tk) bool (True = a real token) with causal order and, for causal
    attention, a sliding `window` (each query sees its last `window` key slots, itself included, counted
    over the cached and new tokens, pads included, as Hugging Face's Mistral counts them; without causal order the
    key slots fewer than `window` away on either side, as ModernBERT's local layers see them) and a `chunk`
    (each query sees the keys of its own chunk of `chunk` tokens, counted from the row's first real token:
    `MaskRule`).

    Returns the cheapest `AttentionMask` that expresses the combination, holding its rule, not a (Tq, Tk)
    tensor. A query left with no key to attend to (a left pad under a causal mask) gets a zero output.
    """
    if window is not None and k_len <= window:
        window = None  # no key is ever farther than the window
    if chunk is not None and (not causal or k_len <= chunk):
        chunk = None  # every real key is in the first chunk
    if key_keep is not None and bool(key_keep.all()):
        key_keep = None
    if documents is not None and bool((documents[:, 1:] == documents[:, :-1]).all()):
        documents = None  # one document a row
    plain = window is None and chunk is None and documents is None
    if key_keep is None and (not causal or q_len == 1) and plain:
        return AttentionMask(dtype=dtype)
    rule = MaskRule(q_len, k_len, device, key_keep, causal, window, chunk, documents)
    is_causal = key_keep is None and q_len == k_len and plain
    return AttentionMask(rule, is_causal, rule.query_keep(), dtype)


def reach_masks(
    reaches: list[KeyReach],
    key_keep: Tensor | None,
    causal: bool,
    q_len: int,
    k_len: int,
    dtype: torch.dtype,
    device: torch.device,
    documents: Tensor | None = None,
) -> dict[KeyReach, AttentionMask]:
    """`build_mask` for each window and chunk the layers of a stack reach (`KeyReach`), by reach."""
    return {r: build_mask(key_keep, causal, q_len, k_len, dtype, device, *r, documents=documents) for r in reaches}
