"""A `MaskRule` as FlexAttention's block mask and mask_mod, without a (Tq, Tk) tensor.

PyTorch's `create_block_mask` evaluates the mask_mod on every (query, key) pair, a (B, Tq, Tk) tensor (4 GiB of
booleans for B = 4 at T = 32,768), to find which blocks of 128 x 128 pairs are empty, partial or full. A rule of
padding, causal order, a window (behind a causal query, or on both sides of a bidirectional one), chunks and packed
documents tells that from the blocks' bounds: the keys some query of a block of queries sees form one range, those
every query of it sees another, and a running count of the kept keys says how many of a key block's keys fall in a
range. The result is the block mask `create_block_mask` would give, in O(B (Tk + blocks)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer.ops.masks import MaskRule

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

BLOCK = 128  # PyTorch's default sparse block size (`flex_attention._DEFAULT_SPARSE_BLOCK_SIZE`)

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]  # FlexAttention's (b, h, q_idx, kv_idx) -> bool


def mask_mod(rule: MaskRule) -> MaskMod:
    """The rule as FlexAttention's mask_mod. Its numbers are tensors, not Python ints, so that `torch.compile`
    takes them as inputs rather than compiling once per value (a cache's length)."""
    keep, device = rule.key_keep, rule.device
    offset = torch.tensor(rule.offset, device=device)
    window = None if rule.window is None else torch.tensor(rule.window, device=device)
    chunk = None if rule.chunk is None else torch.tensor(rule.chunk, device=device)
    lead = rule.lead()[:, 0]  # (B or 1,)
    documents = rule.documents

    def kept(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        seen = keep[b, kv_idx] if keep is not None else kv_idx >= 0
        if window is not None:  # bidirectional: fewer than `window` slots away on either side
            seen = seen & ((kv_idx - q_idx - offset).abs() < window)
        return seen if documents is None else seen & (documents[b, kv_idx] == documents[b, q_idx + offset])

    def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        seen = kv_idx <= q_idx + offset
        if window is not None:
            seen = seen & (kv_idx > q_idx + offset - window)
        if chunk is not None:
            row_lead = lead[b] if keep is not None else lead[0]
            seen = seen & ((kv_idx - row_lead) // chunk == (q_idx + offset - row_lead) // chunk)
        if documents is not None:
            seen = seen & (documents[b, kv_idx] == documents[b, q_idx + offset])
        return seen if keep is None else seen & keep[b, kv_idx]

    return causal if rule.causal else kept


def block_mask(rule: MaskRule) -> BlockMask | None:
    """The rule's `BlockMask` (B or 1 batch rows, one for every head), or None when it masks nothing."""
    from torch.nn.attention.flex_attention import BlockMask

    if rule.key_keep is None and not rule.causal and rule.window is None and rule.documents is None:
        return None
    partial, full = _block_kinds(rule)
    lengths = (rule.q_len, rule.k_len)
    return BlockMask.from_kv_blocks(
        *_ordered(partial), *_ordered(full), BLOCK_SIZE=BLOCK, mask_mod=mask_mod(rule), seq_lengths=lengths
    )


def _block_kinds(rule: MaskRule) -> tuple[Tensor, Tensor]:
    """(partial, full): (B or 1, 1, query blocks, key blocks) bool, the blocks with some but not every pair
    allowed and those with every pair allowed. A block that runs past the end of the queries or keys is never
    full (its missing pairs count as masked, as in `create_block_mask`)."""
    device = rule.device
    q_first = torch.arange(0, rule.q_len, BLOCK, device=device)[:, None]  # (Q blocks, 1)
    q_last = (q_first + BLOCK).clamp(max=rule.q_len) - 1
    k_first = torch.arange(0, rule.k_len, BLOCK, device=device)[None, :]  # (1, K blocks)
    k_last = (k_first + BLOCK).clamp(max=rule.k_len) - 1
    whole = (q_last - q_first + 1 == BLOCK) & (k_last - k_first + 1 == BLOCK)
    if rule.causal:  # the keys some query of the block sees, [some_lo, some_hi], and those every query sees
        some_lo, some_hi = q_first + rule.offset, q_last + rule.offset
        every_lo, every_hi = q_last + rule.offset, q_first + rule.offset
        if rule.window is not None:
            some_lo, every_lo = some_lo - rule.window + 1, every_lo - rule.window + 1
        else:
            some_lo = every_lo = torch.zeros_like(q_first)
        if rule.chunk is not None:  # per row, (B or 1, Q blocks, 1): from the chunk of the first (last) query on
            some_lo = torch.maximum(some_lo, rule.chunk_start(q_first[:, 0] + rule.offset)[..., None])
            every_lo = torch.maximum(every_lo, rule.chunk_start(q_last[:, 0] + rule.offset)[..., None])
    elif rule.window is not None:  # bidirectional, fewer than `window` slots away on either side
        some_lo, some_hi = q_first + rule.offset - rule.window + 1, q_last + rule.offset + rule.window - 1
        every_lo, every_hi = q_last + rule.offset - rule.window + 1, q_first + rule.offset + rule.window - 1
    else:
        some_lo = every_lo = torch.zeros_like(q_first)
        some_hi = every_hi = torch.full_like(q_first, rule.k_len - 1)
    if rule.documents is not None:  # per row, (B, Q blocks, 1): the documents of the first and last query
        first_starts, first_ends = (b[..., None] for b in rule.document_bounds(q_first[:, 0] + rule.offset))
        last_starts, last_ends = (b[..., None] for b in rule.document_bounds(q_last[:, 0] + rule.offset))
        some_lo, every_lo = torch.maximum(some_lo, first_starts), torch.maximum(every_lo, last_starts)
        some_hi, every_hi = torch.minimum(some_hi, last_ends), torch.minimum(every_hi, first_ends)
    lo, hi = torch.maximum(k_first, some_lo), torch.minimum(k_last, some_hi)  # (Q blocks, K blocks)
    keep = rule.key_keep if rule.key_keep is not None else torch.ones(1, rule.k_len, dtype=torch.bool, device=device)
    before = F.pad(keep.long().cumsum(-1), (1, 0))  # (B, Tk + 1): the kept keys before key j

    def kept_in(first: Tensor, last: Tensor) -> Tensor:  # kept keys in [first, last], (B, Q blocks, K blocks)
        rows = max(before.shape[0], first.shape[0] if first.dim() == 3 else 1)
        shape = (rows, *whole.shape)

        def count(at: Tensor) -> Tensor:
            at = at.clamp(0, rule.k_len).expand(shape)
            return before.expand(rows, -1).gather(1, at.flatten(1)).view(shape)

        return count(last + 1) - count(first)

    some = (lo <= hi) & (kept_in(lo, hi) > 0)
    every = whole & (every_lo <= k_first) & (k_last <= every_hi) & (kept_in(k_first, k_last) == BLOCK)
    return (some & ~every)[:, None], every[:, None]


def _ordered(dense: Tensor) -> tuple[Tensor, Tensor]:
    """(B, H, Q blocks, K blocks) bool -> (the number of blocks in each row, their key block indices first, in
    order), int32, as FlexAttention takes them (`BlockMask.from_kv_blocks`)."""
    dense = dense.to(torch.int32)
    indices = torch.argsort(dense, dim=-1, descending=True, stable=True)
    return dense.sum(-1).to(torch.int32), indices.to(torch.int32).contiguous()
