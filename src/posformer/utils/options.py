"""The one way a command's options are declared: a dataclass whose fields carry a default and a help text.

    @dataclass
    class SpeedOptions:
        batch: int = option(8, "sequences per iteration", minimum=1)
        precision: str = option("fp32", "fp32, or bf16 autocast", choices=("fp32", "bf16"))
        progress: bool = option(True, "hide the progress bars", flag="--no-progress")

The same declaration gives the command line (`posformer.cli.option_flags` makes one flag per field, its type,
range and choices checked while parsing) and the checks of an object built in Python (`check_options`), so a
default, a range or a help text is written once. A subclass may declare a field again with a new plain default
(`batch: int = 4`); its help and checks are the base class's. A class that sets `options_group` (a ClassVar)
shows the options it declares under that heading.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING
from typing import Any

from posformer.utils.validation import LARGEST_INT, check_choice, check_int, check_number


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """What `option` records of one field.

    flag: the flag's name ("--no-progress"); None: "--" + the field's name with dashes; False: no flag (set through
        a config or `--set` only); a bare name ("RUN"): a positional argument shown so. A bool option whose default
        is True and whose flag is named turns it off.
    aliases: other spellings of the flag (`--model-name-or-path`).
    minimum / maximum: an int option's smallest and largest values (maximum None: 2**31 - 1, what `check_int`
        allows; every command's int options give the bound of their kind of size, `utils.limits`). low / high
        (low_open / high_open): a float option's interval.
    choices: the values a str option takes. metavar: the value's name in the help.
    repeatable: a list option given once per value (`--question A --question B`), not as one list (`--batch 1 8`).
    """

    help: str
    flag: str | None | bool = None
    aliases: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    repeatable: bool = False


OPTION_KEY = "posformer_option"
GROUP_ATTRIBUTE = "options_group"  # a class attribute: the `--help` heading of the options the class declares


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    flag: str | None | bool = None,
    aliases: Sequence[str] = (),
    minimum: int | None = None,
    maximum: int | None = None,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    repeatable: bool = False,
) -> Any:
    """A dataclass field with its default (or `default_factory`) and what the command line shows of it."""
    spec = OptionSpec(
        help=help,
        flag=flag,
        aliases=tuple(aliases),
        minimum=minimum,
        maximum=maximum,
        low=low,
        high=high,
        low_open=low_open,
        high_open=high_open,
        choices=None if choices is None else tuple(choices),
        metavar=metavar,
        repeatable=repeatable,
    )
    return dataclasses.field(default=default, default_factory=default_factory, metadata={OPTION_KEY: spec})


@dataclasses.dataclass(frozen=True)
class Option:
    """One declared option of a dataclass: its field name, annotated type, default and spec."""

    name: str
    kind: Any
    default: Any
    spec: OptionSpec
    group: str | None = None

    @property
    def base_kind(self) -> Any:
        """The annotated type without `| None` (int for `int | None`)."""
        args = [a for a in typing.get_args(self.kind) if a is not type(None)]
        return (
            args[0] if typing.get_origin(self.kind) in (typing.Union, types.UnionType) and len(args) == 1 else self.kind
        )

    @property
    def optional(self) -> bool:
        return type(None) in typing.get_args(self.kind)


def options(cls: type) -> list[Option]:
    """The declared options of the dataclass `cls`, in field order; a field declared again in a subclass with a
    plain default keeps the spec of the nearest base class that declared it with `option`."""
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        owner = _declaring_class(cls, f.name)
        if owner is None:
            continue
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        spec = owner.__dataclass_fields__[f.name].metadata[OPTION_KEY]
        found.append(Option(f.name, hints[f.name], default, spec, vars(owner).get(GROUP_ATTRIBUTE)))
    return found


def flag_spelling(name: str) -> str:
    """The default flag of an option named `name`: `doc_stride` -> `--doc-stride`."""
    return "--" + name.replace("_", "-")


def _declaring_class(cls: type, name: str) -> type | None:
    """The nearest class in `cls`'s MRO that declares the field `name` with `option`."""
    for klass in cls.__mro__:
        declared = getattr(klass, "__dataclass_fields__", {}).get(name)
        own = name in vars(klass).get("__annotations__", {})
        if own and declared is not None and OPTION_KEY in declared.metadata:
            return klass
    return None


def check_options(values: Any, prefix: str = "", name_of: Callable[[str], str] | None = None) -> None:
    """Raise the `ValueError` of `utils.validation` for the first option of the dataclass object `values` outside
    its declared range or choices; None passes where the type allows it. The field is named `name_of(field)`
    (default: `prefix` + the field's name)."""
    for opt in options(type(values)):
        value = getattr(values, opt.name)
        if value is None and opt.optional:
            continue
        name = name_of(opt.name) if name_of else prefix + opt.name
        listed = typing.get_origin(opt.base_kind) in (list, tuple)
        kind = typing.get_args(opt.base_kind)[0] if listed else opt.base_kind
        for item in value if listed and isinstance(value, (list, tuple)) else [value]:
            _check_value(name, item, kind, opt.spec)


def _check_value(name: str, value: Any, kind: Any, spec: OptionSpec) -> None:
    if spec.minimum is not None or spec.maximum is not None:
        check_int(
            name,
            value,
            minimum=spec.minimum if spec.minimum is not None else -LARGEST_INT - 1,
            maximum=spec.maximum if spec.maximum is not None else LARGEST_INT,
        )
    if kind is float:
        check_number(name, value, spec.low, spec.high, spec.low_open, spec.high_open)
    if spec.choices is not None:
        check_choice(name, value, spec.choices)
