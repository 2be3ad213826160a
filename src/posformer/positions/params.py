"""How an encoding declares, resolves and checks its parameters (`Config.position_params`).

`PositionEncoding` takes these class methods from `ParameterRules`; an encoding declares its parameters and their
defaults in its class attribute `defaults`, and overrides `check_config` (and, where it has one, `max_length`) to
check them against the model's sizes or derive from them. None of them reads a `Config`: `Config.validate` hands
them its fields.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from posformer.positions.sizes import Sizes
from posformer.utils.validation import is_int, is_number


class PositionParams(dict):
    """The resolved parameters of one encoding: its class defaults with the config's values on top.

    It remembers the encoding it belongs to (`encoding`), so that a config whose
    `position` changes (a preset with `position=` overridden, `Config.replace`,
    `dataclasses.replace`) starts from the new encoding's defaults instead of
    carrying parameters the new encoding does not have. A plain dict carries no
    such tag and is checked strictly.
    """

    def __init__(self, encoding: str, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self.encoding = encoding

    def __reduce__(self) -> tuple:
        return type(self), (self.encoding, dict(self))

    def __deepcopy__(self, memo: dict) -> "PositionParams":
        return type(self)(self.encoding, copy.deepcopy(dict(self), memo))


class ParameterRules:
    """The class methods of `PositionEncoding` that resolve and check its parameters; they read the class
    attributes `name` and `defaults` that `PositionEncoding` declares."""

    @classmethod
    def resolve_params(cls, given: Mapping[str, Any]) -> PositionParams:
        """This encoding's parameters: `defaults` with `given` on top, as a `PositionParams`.

        `given` tagged for another encoding (a `PositionParams` of, say, a preset's
        rope) is dropped: the encoding starts from its own defaults. Unknown keys
        of an untagged mapping raise `ValueError` naming them.
        """
        if isinstance(given, PositionParams) and given.encoding != cls.name:
            given = {}
        unknown = sorted(set(given) - set(cls.defaults))
        if unknown:
            allowed = ", ".join(sorted(cls.defaults)) or "none"
            raise ValueError(
                f"Config.position_params has unknown key(s) {unknown} for position={cls.name!r}: "
                f"allowed keys are {allowed}"
            )
        for key, value in given.items():
            cls._check_param_kind(key, value)
        return PositionParams(cls.name, copy.deepcopy({**cls.defaults, **given}))

    @classmethod
    def _check_param_kind(cls, key: str, value: Any) -> None:
        """`value` has the kind of the parameter's default: a bool for a bool, an integer for an integer, a finite
        number for a float, a string for a string (None and container defaults are checked by `check_config`)."""
        default = cls.defaults[key]
        if isinstance(default, bool):
            ok, expected = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, expected = is_int(value), "an integer"
        elif isinstance(default, float):
            ok, expected = is_number(value), "a finite number"
        elif isinstance(default, str):
            ok, expected = isinstance(value, str), "a string"
        else:
            return
        if not ok:
            raise cls.param_error(cls.name, key, value, expected)

    @classmethod
    def check_config(cls, sizes: Sizes, params: Mapping[str, Any], causal: bool = True) -> None:
        """Raise `ValueError` naming the parameter or field when a stack of these `sizes`, causal or not, cannot
        use this encoding with `params`, as `cls(sizes, params, causal)` would take them.

        `params` are already resolved (`resolve_params`): every key is present. `sizes.scale` is not to be read:
        the attention scale may derive from the parameters being checked (DeBERTa's `default_attn_scale`).
        """

    @classmethod
    def max_length(cls, params: Mapping[str, Any], max_positions: int) -> int | None:
        """The longest sequence this encoding can represent with `params` in a model of `max_positions`
        positions (`Config.max_positions`), or None when any length works."""
        return None

    @staticmethod
    def param_error(name: str, key: str, value: Any, expected: str) -> ValueError:
        return ValueError(
            f"Config.position_params[{key!r}]={value!r} is invalid for position={name!r}: expected {expected}"
        )

    @classmethod
    def require_int(
        cls, params: Mapping[str, Any], key: str, low: int, high: int | None = None, expected: str = ""
    ) -> int:
        """`params[key]` when it is an integer in [low, high); else a `param_error` saying `expected`."""
        value = params[key]
        if not is_int(value) or value < low or (high is not None and value >= high):
            raise cls.param_error(cls.name, key, value, expected)
        return value
