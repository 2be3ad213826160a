"""Hugging Face checkpoints in and out of posformer: one module per family.

Each family module (llama.py, bert.py, ...) registers a `Family`: config mapping
and weight rules in both directions. Every module of this package is imported
here, so a new family file registers itself. `from_hf`, `to_hf` and
`load_tokenizer` are the public API, and `bert2bert_from_pretrained` warm-starts a
BERT2BERT encoder-decoder from a BERT checkpoint.
"""

import importlib
import pkgutil

from posformer.hf.api import from_hf, load_tokenizer, to_hf
from posformer.hf.bert2bert import bert2bert_from_pretrained
from posformer.hf.family import UnsupportedCheckpoint, supported
from posformer.hf.hf_checkpoint import CheckpointError
from posformer.hf.mapping import WeightMapError

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "from_hf",
    "to_hf",
    "load_tokenizer",
    "bert2bert_from_pretrained",
    "supported",
    "UnsupportedCheckpoint",
    "CheckpointError",
    "WeightMapError",
]
