"""The names a `transformers` user reaches for, on the model: `gradient_checkpointing_enable` / `_disable` (what
`Transformer.set_activation_checkpointing` does) and `resize_token_embeddings` (a vocabulary grown or cut, as
after adding tokens to a tokenizer).

    model.resize_token_embeddings(len(tokenizer))   # new rows: the mean of the old ones, as transformers does
    model.gradient_checkpointing_enable()
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posformer.utils.limits import MAX_VOCAB
from posformer.utils.validation import check_int


class FamiliarNames:
    """Mixed into `Transformer`: Hugging Face's names for what the model does."""

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any] | None = None) -> None:
        """`set_activation_checkpointing(True)`: each block's activations recomputed in the backward pass."""
        self.set_activation_checkpointing(True)

    def gradient_checkpointing_disable(self) -> None:
        """`set_activation_checkpointing(False)`."""
        self.set_activation_checkpointing(False)

    @property
    def is_gradient_checkpointing(self) -> bool:
        stacks = [getattr(self, name) for name in ("encoder", "decoder") if hasattr(self, name)]
        return any(stack.activation_checkpointing for stack in stacks)

    @torch.no_grad()
    def resize_token_embeddings(self, new_num_tokens: int, mean_resizing: bool = True) -> nn.Embedding:
        """Give the model a vocabulary of `new_num_tokens`: every token embedding and the LM head's rows (and bias)
        keep their first rows; added rows are the mean of the old ones (`mean_resizing`, transformers' default:
        a new token starts where the model expects an average one), else drawn as at initialisation; a tied head
        stays tied. `Config.vocab_size` follows. Returns the input embedding."""
        check_int("resize_token_embeddings: new_num_tokens", new_num_tokens, maximum=MAX_VOCAB)
        old = self.cfg.vocab_size
        for owner, name in self._vocabulary_tables():
            setattr(owner, name, _resized(getattr(owner, name), new_num_tokens, old, mean_resizing, self.cfg.init_std))
        self.cfg = self.cfg.replace(vocab_size=new_num_tokens)
        self.tie_head()
        return self.embed_tokens

    def _vocabulary_tables(self) -> list[tuple[nn.Module, str]]:
        """(owner, attribute) of each module with a row per token: the token embeddings and an LM head's
        projection (a tied one is resized too, for its bias and shape, then tied again)."""
        tables = [(self, "embed_tokens")]
        if self.cfg.separate_decoder_embeddings:
            tables.append((self, "decoder_embed_tokens"))
        proj = getattr(self.head, "proj", None)
        if proj is not None and proj.weight.shape[0] == self.cfg.vocab_size:
            tables.append((self.head, "proj"))
        return tables


def _resized(module: nn.Module, rows: int, old: int, mean_resizing: bool, init_std: float) -> nn.Module:
    """A copy of `module` (an embedding or a linear projection with a row per token) with `rows` rows: the first
    min(rows, old) kept, the others the mean of the old rows (a bias: its mean) or N(0, init_std)."""
    weight = module.weight
    resized = nn.Embedding(rows, weight.shape[1]) if isinstance(module, nn.Embedding) else _linear_like(module, rows)
    resized.to(device=weight.device, dtype=weight.dtype)
    kept = min(rows, old)
    resized.weight[:kept] = weight[:kept]
    if rows > old and mean_resizing:
        resized.weight[old:] = weight.mean(0)
    elif rows > old:
        resized.weight[old:].normal_(0.0, init_std)
    bias = getattr(module, "bias", None)
    if bias is not None:
        resized.bias[:kept] = bias[:kept]
        if rows > old:
            resized.bias[old:] = bias.mean() if mean_resizing else 0.0
    return resized


def _linear_like(module: nn.Module, rows: int) -> nn.Module:
    """A projection of `module`'s class from its input width to `rows` outputs, with a bias when it has one."""
    return type(module)(module.weight.shape[1], rows, bias=getattr(module, "bias", None) is not None)
