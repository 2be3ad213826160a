"""posformer: Transformers from clean, interchangeable parts, with every position encoding behind one interface."""

from posformer import hf, positions
from posformer.config import Config
from posformer.config.irope import irope_layers
from posformer.hf import from_hf, to_hf
from posformer.loading import load_model as load
from posformer.loading import load_tokenizer
from posformer.model import Transformer
from posformer.modules.cache import Cache
from posformer.modules.outputs import ModelOutput
from posformer.sentence_embeddings import sentence_embeddings

__version__ = "0.1.0"

__all__ = [
    "Config",
    "irope_layers",
    "Transformer",
    "ModelOutput",
    "Cache",
    "load",
    "positions",
    "hf",
    "from_hf",
    "to_hf",
    "load_tokenizer",
    "sentence_embeddings",
    "__version__",
]
