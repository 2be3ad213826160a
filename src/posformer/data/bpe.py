"""Byte-level BPE tokenizers trained on documents (`posformer tokenizer train`), with the EOD token `<|endoftext|>`.

    tokenizer = train_byte_bpe(documents(paths), vocab_size=8192)
    files = tokenizer_files(tokenizer, eos_token=EOD_TOKEN)   # tokenizer.json + tokenizer_config.json

GPT-2's recipe: the text is split into words by GPT-2's pattern, each word's UTF-8 bytes are the 256-symbol
alphabet, and merges are learned until `vocab_size` (the bytes, `<|endoftext|>` and the merges; fewer when the
corpus has no more pairs to merge). `<|endoftext|>` is id 0. The result depends on the documents and their order
only: the same documents give the same tokenizer.json, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from posformer.hf.char_byte_tokenizers import EOD_TOKEN

SMALLEST_VOCAB = 257  # the 256 bytes and the EOD token


def train_byte_bpe(documents: Iterable[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE `tokenizers.Tokenizer` of at most `vocab_size` tokens learned from `documents`."""
    if vocab_size < SMALLEST_VOCAB:
        raise ValueError(f"vocab_size={vocab_size}: expected at least {SMALLEST_VOCAB} (256 bytes and {EOD_TOKEN})")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return tokenizer


def sample(documents: Iterable[str], count: int, total: int, seed: int) -> Iterator[str]:
    """`count` of the `total` documents of `documents`, drawn without replacement by `seed`, in their order."""
    generator = torch.Generator().manual_seed(seed)
    chosen = set(torch.randperm(total, generator=generator)[:count].tolist())
    return (text for index, text in enumerate(documents) if index in chosen)
