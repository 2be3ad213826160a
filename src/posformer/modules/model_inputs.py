"""What `Transformer` makes of its inputs before the stacks run: padding masks checked, packed documents checked
(a causal LM's labels ignored at each document's first token) and position ids checked or defaulted."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posformer import positions
from posformer.config import Config
from posformer.modules.cache import Cache
from posformer.modules.heads import IGNORE_INDEX
from posformer.modules.random_positions import sample_positions
from posformer.ops.masks import document_positions, document_starts
from posformer.utils.tensor_checks import check_shape


def padding_keep(mask: Tensor | None, batch: int, length: int, name: str) -> Tensor | None:
    """Validate a (B, length) 0/1 padding mask and return it as bool."""
    if mask is None:
        return None
    check_shape(mask, name, (batch, length))
    return mask.bool()


def packed_documents(
    cfg: Config,
    stack: nn.Module | None,
    document_ids: Tensor | None,
    ids: Tensor,
    labels: Tensor | None,
    cache: Cache | None,
) -> tuple[Tensor | None, Tensor | None]:
    """(document_ids checked: (B, T) integers of an encoder's or a decoder's input, with no cache; labels, a
    causal LM's ignored at each document's first token so that no document predicts from another). stack: the
    stack that reads ids, whose encodings must allow packing."""
    if document_ids is None:
        return None, labels
    if cfg.arch == "encoder_decoder" or cache is not None or cfg.sink_tokens:
        raise ValueError(
            "document_ids (packed documents) are for an encoder's or a decoder's input without a cache or sink "
            f"tokens; this call has arch={cfg.arch!r}, a cache: {cache is not None}, "
            f"sink_tokens={cfg.sink_tokens}"
        )
    check_shape(document_ids, "document_ids", tuple(ids.shape), integers=True)
    for encoding in stack.encodings:
        if encoding.packing_refusal is not None:
            raise ValueError(
                f"document_ids: position={encoding.name!r} cannot pack documents: {encoding.packing_refusal}"
            )
    documents = document_ids.long()
    if labels is not None and cfg.arch == "decoder":
        labels = labels.masked_fill(document_starts(documents), IGNORE_INDEX)
    return documents, labels


def input_positions(
    cfg: Config,
    training: bool,
    pos: Tensor | None,
    ids: Tensor,
    start: int,
    documents: Tensor | None = None,
    cache: Cache | None = None,
) -> Tensor:
    """`position_ids` checked, or the default: start.. start + T - 1, each token's place in its document with
    packed `documents`, or while training with `Config.random_positions` an ordered random subset of its range
    (`posformer.modules.random_positions`). ids: (B, T).

    position_ids may have axes, (3, B, T), for M-RoPE (`positions.mrope`; the stack's encodings check they read
    them). A `cache` that was given such ids goes on from their largest position + 1 on every axis when a later
    call gives none (`Cache.next_axes_position`), and records those of this call."""
    batch, length = ids.shape
    if pos is None and cache is not None and cache.next_axes_position is not None:
        pos = positions.continued_axes(cache.next_axes_position, length)
    if isinstance(pos, Tensor) and pos.dim() == 3:
        return _axes_positions(cfg, pos, batch, length, cache)
    if pos is None and documents is not None:
        return document_positions(documents)
    if pos is None:
        if training and cfg.random_positions is not None and start == 0:
            return sample_positions(batch, length, cfg.random_positions, ids.device)
        return torch.arange(start, start + length, device=ids.device).expand(batch, length)
    check_shape(pos, "position_ids", (batch, length), integers=True)
    return pos.long()


def _axes_positions(cfg: Config, pos: Tensor, batch: int, length: int, cache: Cache | None) -> Tensor:
    """Position ids with axes (3, B, T) checked, and recorded in the `cache`."""
    positions.check_axes_positions(pos)
    check_shape(pos[0], "position_ids axes", (batch, length), integers=True)
    if cfg.sink_tokens:
        raise ValueError(
            f"position_ids with axes (3, batch, length) cannot follow sink tokens (Config.sink_tokens="
            f"{cfg.sink_tokens}), which take one position each"
        )
    if cache is not None:
        cache.record_axes(pos)
    return pos.long()
