"""posformer: Transformers from clean, interchangeable parts, with every position encoding behind one interface."""

from posformer import positions
from posformer.cache import Cache
from posformer.config import Config
from posformer.model import Transformer
from posformer.outputs import ModelOutput

__version__ = "0.1.0"

__all__ = ["Config", "Transformer", "ModelOutput", "Cache", "positions", "__version__"]
