"""The Hugging Face way to save and load a model, on the model itself:

    model.save_pretrained("my-model", tokenizer=tok)    # config.json + model.safetensors (+ the tokenizer's files)
    model = Transformer.from_pretrained("runs/demo-lm") # as posformer.load: a run, a checkpoint, a model dir, HF
    model.config                                        # the Config (also `.cfg`)

The model declares these; the file formats belong to the layers above it, which install the two functions that
do the work when they are imported (and `import posformer` imports them): `checkpoints.native.save_pretrained`
as `saver`, `loading.load_model` as `loader`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

if TYPE_CHECKING:
    from posformer.config import Config
    from posformer.model import Transformer


class Pretrained:
    """`config`, `save_pretrained` and `from_pretrained` for `Transformer` (see the module docstring)."""

    cfg: "Config"
    saver: ClassVar[Callable[..., Path]]
    loader: ClassVar[Callable[..., Any]]

    @property
    def config(self) -> "Config":
        """The model's `Config` (the same object as `.cfg`)."""
        return self.cfg

    def save_pretrained(self, out_dir: str | os.PathLike, tokenizer: Any = None) -> Path:
        """Write config.json and model.safetensors into `out_dir` (each file moved into place whole), and the
        tokenizer's files beside them when one is given (anything with `save_pretrained(directory)`: a
        `transformers` tokenizer, or posformer's own). `posformer.load` reads the directory back."""
        if tokenizer is not None and not callable(getattr(tokenizer, "save_pretrained", None)):
            raise TypeError(
                f"save_pretrained: tokenizer is a {type(tokenizer).__name__}; expected an object with "
                "save_pretrained(directory), such as a transformers tokenizer"
            )
        written = type(self).saver(self, out_dir)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(written))
        return written

    @classmethod
    def from_pretrained(
        cls, path_or_hub_id: str | os.PathLike, dtype: torch.dtype | None = None, device: str | None = None
    ) -> "Transformer":
        """Any model posformer reads, in eval mode, as `posformer.load` (a training run, a checkpoint folder, a
        model dir, a Hugging Face dir or Hub id)."""
        return cls.loader(path_or_hub_id, dtype=dtype, device=device)
