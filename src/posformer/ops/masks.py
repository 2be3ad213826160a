"""Attention masks: key padding, causal order, sliding windows and padded queries, combined once per forward."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class AttentionMask:
    """What one attention call may attend to.

    additive: (B or 1, 1, Tq, Tk) with 0 where allowed and the dtype's most
      negative finite value where not, or None when nothing is masked beyond
      `is_causal`. Finite, so a row with nothing to attend to gives a uniform
      (not NaN) distribution, and that row is then zeroed by `query_keep`.
    is_causal: a plain causal mask with Tq == Tk and nothing else (the SDPA fast path).
    query_keep: (B, Tq) bool, False for padded queries whose output is zeroed, or None.
    """

    additive: Tensor | None = None
    is_causal: bool = False
    query_keep: Tensor | None = None
    _with_last_bias: tuple[Tensor, Tensor] | None = field(default=None, repr=False, compare=False)

    def materialized(self, q_len: int, k_len: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The mask as an additive tensor, the causal part included (for the eager path and biases)."""
        if not self.is_causal:
            return self.additive
        return causal_additive(q_len, k_len, dtype, device)

    def rows(self, start: int, end: int, keys: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The additive mask of queries [start, end) over the first `keys` keys, (B or 1, 1, end - start, keys),
        or None: for attention in blocks of queries. A plain causal mask is made for the block alone (its queries
        are the last `end - start` of the first `end` keys), so `keys` must be `end` then."""
        if self.is_causal:
            if keys != end:
                raise ValueError(f"a causal block of queries [{start}, {end}) reads keys [0, {end}), not {keys}")
            return causal_additive(end - start, end, dtype, device)
        if self.additive is None:
            return None
        query_rows = slice(None) if self.additive.shape[-2] == 1 else slice(start, end)  # one row: every query's
        return self.additive[..., query_rows, :keys]

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


def causal_allowed(q_len: int, k_len: int, device: torch.device, window: int | None = None) -> Tensor:
    """(Tq, Tk) bool: query i, the (k_len - q_len + i)-th token, sees keys j <= k_len - q_len + i; with a
    sliding `window` W only the last W of them, j > k_len - q_len + i - W."""
    offset = k_len - q_len
    rows = torch.arange(q_len, device=device)[:, None] + offset
    keys = torch.arange(k_len, device=device)[None, :]
    allowed = keys <= rows
    return allowed if window is None else allowed & (keys > rows - window)


def causal_additive(
    q_len: int, k_len: int, dtype: torch.dtype, device: torch.device, window: int | None = None
) -> Tensor:
    """(1, 1, Tq, Tk) additive causal mask (within a sliding `window` when one is given)."""
    allowed = causal_allowed(q_len, k_len, device, window)
    return torch.zeros((), dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def build_mask(
    key_keep: Tensor | None,
    causal: bool,
    q_len: int,
    k_len: int,
    dtype: torch.dtype,
    device: torch.device,
    window: int | None = None,
) -> AttentionMask:
    """Combine a key padding mask (B, Tk) bool (True = a real token) with causal order and, for causal
    attention, a sliding `window` (each query sees its last `window` key slots, itself included, counted
    over the cached and new tokens, pads included, as Hugging Face's Mistral counts them).

    Returns the cheapest `AttentionMask` that expresses the combination. A query
    left with no key to attend to (a left pad under a causal mask) gets a zero output.
    """
    if window is not None and (not causal or k_len <= window):
        window = None  # no key is ever farther than the window
    if key_keep is not None and bool(key_keep.all()):
        key_keep = None
    if key_keep is None:
        if not causal or (q_len == 1 and window is None):
            return AttentionMask()
        if q_len == k_len and window is None:
            return AttentionMask(is_causal=True)
        return AttentionMask(additive=causal_additive(q_len, k_len, dtype, device, window))
    allowed = key_keep[:, None, None, :]  # (B, 1, 1, Tk)
    if causal:
        allowed = allowed & causal_allowed(q_len, k_len, device, window)
    query_keep = allowed.any(-1).squeeze(1)  # (B, Tq)
    additive = torch.zeros((), dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    return AttentionMask(additive=additive, query_keep=None if bool(query_keep.all()) else query_keep)
