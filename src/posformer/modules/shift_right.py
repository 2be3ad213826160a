"""Decoder inputs for teacher forcing of an encoder-decoder: the labels shifted right behind the start token."""

from __future__ import annotations

from torch import Tensor

from posformer.config import Config
from posformer.modules.heads import IGNORE_INDEX
from posformer.utils.validation import check_token_in_vocabulary


def shift_right(labels: Tensor, cfg: Config) -> Tensor:
    """[decoder_start, labels[:-1]], with -100 replaced by pad: labels (B, T) -> (B, T).

    `Config.decoder_start_token_id` and the pad (`Config.pad_token_id`, else the start id) must be token ids in
    [0, vocab_size): a `ValueError` names the one that is not.
    """
    if not isinstance(labels, Tensor) or labels.dim() != 2:
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels must be a tensor of shape (batch, length) to build decoder inputs from, got {shape}")
    start = cfg.decoder_start_token_id
    check_token_in_vocabulary(
        "Config.decoder_start_token_id",
        start,
        cfg.vocab_size,
        "shift_right starts the decoder inputs built from labels with it",
    )
    if cfg.pad_token_id is not None:
        check_token_in_vocabulary(
            "Config.pad_token_id", cfg.pad_token_id, cfg.vocab_size, "shift_right writes it where labels hold -100"
        )
    shifted = labels.new_full(labels.shape, start)
    shifted[:, 1:] = labels[:, :-1]
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else start
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad)
