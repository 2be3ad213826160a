"""Attention with a position bias at any length: one block of queries at a time, each asking its encoding for the
bias of its own rows, so that no (T, S) bias outlives a block.

A whole bias (B, H, T, S) in float32 is 12 GiB for 12 heads at T = S = 16,384, and every layer of a training step
keeps its own for the backward. Here the bias of queries [start, end) is computed from their positions
(`bias_rows`), combined with the mask's rows, used by one attention call and dropped; in training each block runs
under activation checkpointing, so its bias is computed again in the backward instead of being stored. Under a
plain causal mask, a block reads only the keys up to its last query. Memory then grows with T * rows, not T * S.

A bias small enough (`BIAS_BYTES`) is still computed whole, as before: blocks cost each layer its own bias
computation, which a whole bias shares across layers (`PositionEncoding.per_forward`), and in training the forward
of each block once more. Past it, blocks are small: an encoding's intermediate tensors can
be many times its bias (FIRE's MLP holds `mlp_width` values per pair).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from posformer.ops.masks import AttentionMask, causal_allowed
from posformer.ops.softmax_attention import softmax_attention

# bias_rows(start, end, keys): the bias of queries [start, end) over the first `keys` keys, (B or 1, H, end - start,
# keys), or None
BiasRows = Callable[[int, int, int], "Tensor | None"]
# values(probs, rows): the term added to the output of the queries `rows` whose probabilities over the first
# probs.shape[-1] keys are probs, (B, H, rows, keys) -> (B, H, rows, dh) or None
ValuesTerm = Callable[[Tensor, slice], "Tensor | None"]

# (whole, block): a float32 bias of at most `whole` bytes is computed whole; larger, in blocks of queries whose bias is
# at most `block` bytes. A GPU holds more and pays more per call, so it takes more at once.
BIAS_BYTES = {"cpu": (64 * 2**20, 4 * 2**20), "cuda": (2**30, 256 * 2**20)}
MIN_BLOCK_ROWS = 16


def bias_block_rows(
    batch: int, heads: int, q_len: int, k_len: int, device: torch.device, cpu_block_bytes: int | None = None
) -> int | None:
    """Queries per block for a bias of this shape on `device`, or None when the whole (batch, heads, q_len, k_len)
    float32 bias is small enough to compute at once (`BIAS_BYTES`). cpu_block_bytes: the bytes of a block's bias on
    the CPU in place of BIAS_BYTES's (`PositionEncoding.cpu_bias_block_bytes`)."""
    whole, block = BIAS_BYTES.get(device.type, BIAS_BYTES["cpu"])
    if device.type == "cpu" and cpu_block_bytes is not None:
        block = cpu_block_bytes
    row_bytes = batch * heads * k_len * 4
    if row_bytes * q_len <= whole:
        return None
    return max(MIN_BLOCK_ROWS, block // row_bytes)


def attend_in_bias_blocks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask,
    bias_rows: BiasRows,
    scale: float,
    dropout: float,
    values: ValuesTerm | None,
    rows: int,
    sinks: Tensor | None = None,
) -> Tensor:
    """softmax(scale * q.k + bias + mask) v (+ the `values` term; with `sinks` in the denominator), `rows` queries at a
    time.

    q: (B, H, T, dh); k, v: (B, Hkv, S, dh) -> (B, H, T, dh). Queries that `mask.query_keep` drops are not zeroed
    here (`attend` does it). With gradients on, each block is checkpointed: its bias and scores are recomputed in
    the backward, and the random state of its dropout is replayed. Without, each block writes its rows of one
    output: small block outputs kept in a list between the large tensors each block frees keep glibc's heap from
    reusing them (a no-grad forward of alibi at T = 16,384, d_model 192, 4 layers: 935 MiB resident above the model
    that way, 184 MiB this way).
    """
    length, keys_len = q.shape[-2], k.shape[-2]
    training = torch.is_grad_enabled()
    outputs = []
    out = None if training else q.new_empty((*q.shape[:-1], v.shape[-1]))
    for start in range(0, length, rows):
        end = min(start + rows, length)
        keys = end if mask.is_causal else keys_len  # a plain causal mask: no key past the block's last query
        block = partial(_block, mask, bias_rows, values, sinks, scale, dropout, start, end)
        args = (q[:, :, start:end], k[:, :, :keys], v[:, :, :keys])
        if training:
            outputs.append(checkpoint(block, *args, use_reentrant=False))
        else:  # written in place (see above)
            out[:, :, start:end] = block(*args)
    return torch.cat(outputs, dim=-2) if training else out


def _block(
    mask: AttentionMask,
    bias_rows: BiasRows,
    values: ValuesTerm | None,
    sinks: Tensor | None,
    scale: float,
    dropout: float,
    start: int,
    end: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
) -> Tensor:
    """One block: queries [start, end) (q: (B, H, rows, dh)) over the keys k, v: (B, Hkv, keys, dh)."""
    keys = k.shape[-2]
    bias = bias_rows(start, end, keys)
    if bias is not None and mask.is_causal:
        additive = _with_causal_rows(bias.to(q.dtype), start)
    else:
        additive = mask.rows(start, end, keys, q.dtype, q.device)
        if bias is not None:
            bias = bias.to(q.dtype)
            additive = (bias if additive is None else torch.where(additive < 0, additive, bias)).contiguous()
    if values is not None or sinks is not None:
        term = None if values is None else partial(values, rows=slice(start, end))
        return softmax_attention(q, k, v, additive, None, scale, dropout, term, sinks)[0]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=additive, scale=scale, dropout_p=dropout, enable_gqa=k.shape[1] != q.shape[1]
    )


def _with_causal_rows(bias: Tensor, start: int) -> Tensor:
    """bias (B or 1, H, rows, start + rows) of the queries [start, start + rows) with the keys after each query
    set to the mask's value; contiguous. Only the last rows x rows keys hold any such pair: the mask is not
    built over all the keys."""
    rows = bias.shape[-2]
    hidden = ~causal_allowed(rows, rows, bias.device)
    tail = bias[..., start:].masked_fill(hidden, torch.finfo(bias.dtype).min)
    return torch.cat([bias[..., :start], tail], dim=-1)
