"""Registry of position encodings: name -> class; `build` is the one place in `positions/` that reads a `Config`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from posformer.positions.contract import PositionEncoding
from posformer.positions.sizes import Sizes

if TYPE_CHECKING:
    from posformer.config import Config

_REGISTRY: dict[str, type[PositionEncoding]] = {}


def register(name: str) -> Callable[[type[PositionEncoding]], type[PositionEncoding]]:
    """Class decorator: make an encoding available as `Config(position=name)`."""

    def add(cls: type[PositionEncoding]) -> type[PositionEncoding]:
        if name in _REGISTRY:
            raise ValueError(f"position encoding {name!r} is already registered by {_REGISTRY[name].__name__}")
        _check_declarations(name, cls)
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return add


def _check_declarations(name: str, cls: type[PositionEncoding]) -> None:
    """Raise `TypeError` when `cls` defines the `bias` or `values` hook without declaring it (`adds_bias`,
    `adds_values`): the model reads the declarations, so an undeclared hook would be silently left out."""
    for hook, flag in (("bias", "adds_bias"), ("values", "adds_values")):
        if getattr(cls, hook) is not getattr(PositionEncoding, hook) and not getattr(cls, flag):
            raise TypeError(
                f"position encoding {name!r} ({cls.__name__}) defines the {hook!r} hook: declare {flag} = True "
                "(positions/contract.py)"
            )
    if cls.adds_values and cls.sdpa_compatible:
        raise TypeError(f"position encoding {name!r} ({cls.__name__}) adds values: declare sdpa_compatible = False")


def names() -> list[str]:
    """Every registered encoding name, sorted."""
    return sorted(_REGISTRY)


def usable(arch: str) -> list[str]:
    """The encodings a model of `arch` can use: every one for "decoder", those not `causal_only` otherwise."""
    return [name for name in names() if arch == "decoder" or not _REGISTRY[name].causal_only]


def get(name: str) -> type[PositionEncoding]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown position encoding {name!r}: expected one of {', '.join(names())}")
    return _REGISTRY[name]


def build(cfg: "Config", causal: bool, n_layers: int) -> PositionEncoding:
    """The encoding `cfg.position` for one stack of `n_layers` layers."""
    sizes = Sizes(
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        head_dim=cfg.head_dim,
        max_positions=cfg.max_positions + cfg.sink_tokens,
        scale=cfg.scale,
        norm_eps=cfg.norm_eps,
        dropout=cfg.dropout,
        init_std=cfg.init_std,
    )
    return get(cfg.position)(sizes, cfg.position_params, causal=causal, n_layers=n_layers)
