"""Sentence embeddings from an encoder: mean pooling over the real tokens, then L2 normalisation.

This is what sentence-transformers models such as all-MiniLM-L6-v2 compute
(Transformer -> Pooling(mean) -> Normalize), so with such a checkpoint loaded by
`posformer.from_hf` the vectors match `SentenceTransformer.encode(...,
normalize_embeddings=True)`, provided the same `max_length` truncation is used
(sentence-transformers reads it from `sentence_bert_config.json`, e.g. 256).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from posformer import positions
from posformer.model import Transformer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The mean of the hidden states over the positions where the mask is 1.

    hidden: (B, T, d), attention_mask: (B, T) of 0/1 -> (B, d). A row with no token gives zeros.
    """
    if attention_mask.shape != hidden.shape[:2]:
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}; expected {tuple(hidden.shape[:2])}")
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def max_length_of(model: Transformer, tokenizer: PreTrainedTokenizerBase) -> int:
    """The longest input both the tokenizer and the model's position encoding accept."""
    cfg = model.cfg
    limit = positions.get(cfg.position).max_length(cfg.position_params, cfg.max_positions) or cfg.max_positions
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    return min(limit, tokenizer_limit) if isinstance(tokenizer_limit, int) else limit


@torch.no_grad()
def sentence_embeddings(
    model: Transformer,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    max_length: int | None = None,
    batch_size: int = 32,
    normalize: bool = True,
) -> Tensor:
    """Embed `sentences` with an encoder: tokenize, run, mean-pool over the attention mask, L2-normalise.

    model: an encoder `Transformer` (e.g. `pf.from_hf("all-MiniLM-L6-v2")`); tokenizer: a Hugging Face
    tokenizer (`pf.load_tokenizer(...)`). Sentences longer than `max_length` tokens (default: the
    longest the tokenizer and the model accept) are truncated. Returns (len(sentences), d_model)
    float32 vectors on the model's device, in the order given.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a sequence of strings, not one string")
    if model.cfg.arch != "encoder":
        raise ValueError(f"sentence_embeddings needs an encoder model, got arch={model.cfg.arch!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    max_length = max_length or max_length_of(model, tokenizer)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    chunks: list[Tensor] = []
    try:
        for start in range(0, len(sentences), batch_size):
            batch = tokenizer(
                list(sentences[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            )
            mask = batch["attention_mask"].to(device)
            types = batch.get("token_type_ids") if model.cfg.type_vocab_size else None
            out = model(
                batch["input_ids"].to(device),
                attention_mask=mask,
                token_type_ids=None if types is None else types.to(device),
            )
            if out.last_hidden_state is None:  # every forward of a Transformer returns it
                raise ValueError("sentence_embeddings: the model returned no last_hidden_state")
            pooled = mean_pool(out.last_hidden_state.float(), mask)
            chunks.append(F.normalize(pooled, p=2, dim=-1) if normalize else pooled)
    finally:
        model.train(was_training)
    if not chunks:
        return torch.zeros(0, model.cfg.d_model, device=device)
    return torch.cat(chunks)
