"""The public way to load and save models, as a Hugging Face user expects it.

    model = posformer.load("runs/demo-lm")            # a run, a checkpoint, a model dir, an HF dir or Hub id
    model = posformer.Transformer.from_pretrained(path)  # the same
    model.save_pretrained("my-model", tokenizer=tok)   # config.json + model.safetensors (+ the tokenizer's files)
    model.config                                       # the Config (also `.cfg`)

What a path may be is `loading.load_model`'s to decide, the one loader the commands use too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from posformer.config import Config
    from posformer.model import Transformer


def load(
    path_or_hub_id: str | os.PathLike, dtype: torch.dtype | None = None, device: str | None = None
) -> "Transformer":
    """Any model posformer reads, in eval mode: a training run (its newest valid checkpoint), a checkpoint folder,
    a `save_pretrained` directory, or a Hugging Face model directory or Hub id (`from_hf`)."""
    from posformer.loading import load_model

    return load_model(path_or_hub_id, dtype=dtype, device=device)


class Pretrained:
    """`config`, `save_pretrained` and `from_pretrained` for `Transformer`."""

    cfg: "Config"

    @property
    def config(self) -> "Config":
        """The model's `Config` (the same object as `.cfg`)."""
        return self.cfg

    def save_pretrained(self, out_dir: str | os.PathLike, tokenizer: Any = None) -> Path:
        """Write config.json and model.safetensors into `out_dir` (each file moved into place whole), and the
        tokenizer's files beside them when one is given (anything with `save_pretrained(directory)`: a
        `transformers` tokenizer, or posformer's own). `posformer.load` reads the directory back."""
        from posformer.checkpoints.native import save_pretrained

        if tokenizer is not None and not callable(getattr(tokenizer, "save_pretrained", None)):
            raise TypeError(
                f"save_pretrained: tokenizer is a {type(tokenizer).__name__}; expected an object with "
                "save_pretrained(directory), such as a transformers tokenizer"
            )
        written = save_pretrained(self, out_dir)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(written))
        return written

    @classmethod
    def from_pretrained(
        cls, path_or_hub_id: str | os.PathLike, dtype: torch.dtype | None = None, device: str | None = None
    ) -> "Transformer":
        """`posformer.load(path_or_hub_id, dtype, device)`."""
        return load(path_or_hub_id, dtype=dtype, device=device)
