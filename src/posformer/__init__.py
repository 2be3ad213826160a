"""posformer: Transformers from clean, interchangeable parts, with every position encoding behind one interface.

The public names are imported at their first use (`pf.Config`, `pf.load`, ...), so that `import posformer`, and
the `posformer` command's `--help`, do not import torch; `from posformer import Config` works as it reads.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# each public name: (the module that defines it, its name there; None: the module itself)
PUBLIC: dict[str, tuple[str, str | None]] = {
    "Config": ("posformer.config", "Config"),
    "irope_layers": ("posformer.config.irope", "irope_layers"),
    "Transformer": ("posformer.model", "Transformer"),
    "ModelOutput": ("posformer.modules.outputs", "ModelOutput"),
    "Cache": ("posformer.modules.cache", "Cache"),
    "load": ("posformer.loading", "load_model"),
    "positions": ("posformer.positions", None),
    "hf": ("posformer.hf", None),
    "from_hf": ("posformer.hf", "from_hf"),
    "to_hf": ("posformer.hf", "to_hf"),
    "load_tokenizer": ("posformer.loading", "load_tokenizer"),
    "sentence_embeddings": ("posformer.sentence_embeddings", "sentence_embeddings"),
}

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


def __getattr__(name: str) -> Any:
    """A public name, imported at its first use; else a submodule (`posformer.train`), as an eager import of
    everything used to leave them on the package."""
    if name in PUBLIC:
        module, attribute = PUBLIC[name]
        found = importlib.import_module(module)
        value = found if attribute is None else getattr(found, attribute)
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC})


class _Package(types.ModuleType):
    """The package's module type: the import system binds each submodule it imports on its package, and a submodule
    named as a public function (`posformer.sentence_embeddings`) must not hide the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and PUBLIC.get(name, ("", None))[1] is not None:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
