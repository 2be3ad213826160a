"""Command-line flags made from an options dataclass (`posformer.utils.options`): one flag per field.

    add_option_flags(parser, SpeedOptions)          # --batch, --length, ..., --no-progress
    options = options_from_args(SpeedOptions, args)  # SpeedOptions(batch=..., ...)

A field's type gives the flag's: an int or float is read and its declared range checked while parsing (an
argparse error naming the flag), a str with choices lists them, a list takes one or more values, a bool is a
switch (`--compile`; `--no-progress` for a named flag that turns a True default off; `--x/--no-x` otherwise).
The help is the field's, with its default.
"""

from __future__ import annotations

import argparse
import json
import textwrap
import typing
from collections.abc import Collection, Mapping
from dataclasses import MISSING
from typing import Any, TypeVar

from posformer.cli.arg_types import number_type
from posformer.utils.options import Option, flag_spelling, options
from posformer.utils.validation import int_range, number_interval

T = TypeVar("T")


def add_option_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    only: Collection[str] | None = None,
    skip: Collection[str] = (),
    required: Collection[str] = (),
    defaults: Mapping[str, Any] | None = None,
    underscored: bool = False,
    groups: Mapping[str, Collection[str]] | None = None,
    checked: bool = True,
    unset: str | None = None,
    listed: bool = True,
) -> None:
    """One flag per option of `cls`, in field order (or those in `only`, in its order), less `skip`.

    required: options the command line must give (besides those without a default).
    defaults: parse-time defaults that replace the field's (None: "unset", for an option whose default depends on
        others).
    underscored: also accept `--doc_stride` for `--doc-stride` (Hugging Face's example scripts spell them so).
    groups: {title: option names} shown under their own heading in `--help` (besides those whose class names a
        heading, `options_group`).
    checked: the parser refuses a value outside the option's range (an argparse error naming the flag); False: it
        reads the type only, for a command that checks its options after parsing.
    unset: what an option left unset (None) stands for, in its help: "the preset's".
    listed: a str option's choices are the flag's (listed in `--help`, refused while parsing); False: they are
        checked after parsing only, with the options' other ranges (`utils.options.check_options`).
    """
    titled = {name: title for title, names in (groups or {}).items() for name in names}
    made: dict[str, Any] = {}
    declared = {opt.name: opt for opt in options(cls)}
    unknown = sorted(set(only or ()) - set(declared))
    if unknown:
        raise ValueError(f"{cls.__name__} declares no option(s) {unknown}")
    for opt in declared.values() if only is None else (declared[name] for name in dict.fromkeys(only)):
        if opt.spec.flag is False or opt.name in skip:
            continue
        title = titled.get(opt.name, opt.group)
        target = parser if title is None else made.setdefault(title, parser.add_argument_group(title))
        default = (defaults or {}).get(opt.name, opt.default)
        must = opt.name in required or default is MISSING
        made_options = _flag_options(opt, default, must, checked, unset, listed)
        if _positional(opt):  # argparse names a positional's value by its dest and takes no `required`
            if not made_options.pop("required", False) and "nargs" not in made_options:
                made_options["nargs"] = "?"  # a positional with a default may be left out
            target.add_argument(made_options.pop("dest"), **{"metavar": opt.spec.flag, **made_options})
        else:
            target.add_argument(*_spellings(opt, underscored), **made_options)


def options_from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """`cls` built from the parsed options it declares (those the parser has) and `given`."""
    values = {opt.name: getattr(args, opt.name) for opt in options(cls) if hasattr(args, opt.name)}
    return cls(**{**values, **given})


def set_only_help(cls: type, width: int = 100) -> str:
    """The options of `cls` without a flag, one per line with its help, wrapped to `width`: the text of a group
    under a command's `--set KEY=VALUE` (in a parser that shows its descriptions as written)."""
    lines = []
    for opt in options(cls):
        if opt.spec.flag is False:
            lines += textwrap.wrap(f"{opt.name}: {opt.spec.help}", width, initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines)


def settings_help(cls: type, prefix: str = "", width: int = 100) -> str:
    """Every option of `cls`, one per line: `prefix` and its name, then its help, its choices (unless the help names
    them) and its default as YAML (what a config file or `--set` gives), wrapped to `width` under the help column:
    the text of a group listing a section of a run's settings (in a parser that shows its descriptions as written)."""
    declared = options(cls)
    column = 2 + max(len(prefix + opt.name) for opt in declared) + 2
    lines = []
    for opt in declared:
        choices = opt.spec.choices or ()
        notes = [f"one of {', '.join(choices)}"] if any(choice not in opt.spec.help for choice in choices) else []
        if "default" not in opt.spec.help and not (opt.default is None and "null" in opt.spec.help):
            notes.append(f"default: {yaml_value(opt.default)}")
        text = opt.spec.help + (f" ({'; '.join(notes)})" if notes else "")
        name = f"  {prefix}{opt.name}".ljust(column)
        lines += textwrap.wrap(name + text, width, initial_indent="", subsequent_indent=" " * column)
    return "\n".join(lines)


def yaml_value(value: Any) -> str:
    """`value` as a YAML flow value (`null`, `true`, `[0.9, 0.95]`, `"ROMEO:\\n"`), for a help text."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(item) for item in value) + "]"
    if isinstance(value, str) and (not value or not value.isprintable() or any(c in value for c in ":#[]{},'\" ")):
        return json.dumps(value)
    return str(value)


def flag_name(opt: Option) -> str:
    """The flag of an option: its declared name, or `--` and the field's name with dashes."""
    return opt.spec.flag if isinstance(opt.spec.flag, str) else flag_spelling(opt.name)


def _positional(opt: Option) -> bool:
    """An option whose declared flag is a bare name (`RUN`): given by its place on the command line."""
    return isinstance(opt.spec.flag, str) and not opt.spec.flag.startswith("-")


def _spellings(opt: Option, underscored: bool) -> list[str]:
    names = [flag_name(opt), *opt.spec.aliases]
    if underscored:
        names += ["--" + n[2:].replace("-", "_") for n in names if "-" in n[2:]]
    return names


def _flag_options(
    opt: Option, default: Any, required: bool, checked: bool, unset: str | None, listed: bool = True
) -> dict[str, Any]:
    """The keyword arguments of `add_argument` for one option."""
    spec = opt.spec
    kind = opt.base_kind
    made: dict[str, Any] = dict(dest=opt.name, help=_help(opt, default, required, unset))
    if spec.metavar:
        made["metavar"] = spec.metavar
    if kind is bool:
        if default is True and isinstance(spec.flag, str):
            return {**made, "action": "store_false", "default": True}
        action = argparse.BooleanOptionalAction if default is True else "store_true"
        return {**made, "action": action, "default": default}
    if typing.get_origin(kind) in (list, tuple):
        kind = typing.get_args(kind)[0]
        made["action"] = "append" if spec.repeatable else SplitList
        made["nargs"] = None if spec.repeatable else "+"
    if required:
        made["required"] = True
    else:
        made["default"] = list(default) if isinstance(default, (list, tuple)) else default
    if spec.choices is not None and listed:
        made["choices"] = spec.choices
    made["type"] = _value_type(opt, kind) if checked else kind
    return made


class SplitList(argparse.Action):
    """A list option's values, given apart or comma-separated (`--batch 1 8`, `--positions rope,alibi`), each read
    by the option's type."""

    def __init__(self, *args: Any, type: Any = str, choices: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # the type and choices are each item's, applied here
        self.item_type, self.item_choices = type, choices

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, *_: Any) -> None:
        items = []
        for piece in (p.strip() for value in values for p in value.split(",")):
            if not piece:
                continue
            try:
                items.append(self.item_type(piece))
            except (TypeError, ValueError, argparse.ArgumentTypeError) as err:
                raise argparse.ArgumentError(self, str(err) or f"{piece!r} is not valid") from None
            if self.item_choices is not None and items[-1] not in self.item_choices:
                raise argparse.ArgumentError(self, f"{piece!r} is not one of {', '.join(self.item_choices)}")
        setattr(namespace, self.dest, items)


def _value_type(opt: Option, kind: Any) -> Any:
    """The argparse `type` of an int, float or str value, with the option's range."""
    spec = opt.spec
    if kind is int:
        return _int_type(spec.minimum, spec.maximum)
    if kind is float:
        expected = number_interval(spec.low, spec.high, spec.low_open, spec.high_open)
        return number_type(float, lambda v: _inside(v, spec.low, spec.high, spec.low_open, spec.high_open), expected)
    return str


def _int_type(low: int | None, high: int | None) -> Any:
    """The argparse `type` of an int in [`low`, `high`]: a value below `low` is "not a positive integer" (or
    ">= low"), one above `high` "not an integer in [low, high]". No `high`: 2**31 - 1 and beyond are refused by the
    options' own check, which says so."""
    at_least = number_type(int, lambda v: low is None or v >= low, int_range(low))
    if high is None:
        return at_least

    def parse(text: str) -> int:
        value = at_least(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"{text} is not {int_range(low, high, above=True)}")
        return value

    parse.__name__ = at_least.__name__
    return parse


def _inside(value: float, low: float | None, high: float | None, low_open: bool, high_open: bool) -> bool:
    above = low is None or (value > low if low_open else value >= low)
    below = high is None or (value < high if high_open else value <= high)
    return above and below


def _help(opt: Option, default: Any, required: bool, unset: str | None) -> str:
    """The option's help and, unless it says its default itself, the default."""
    text = opt.spec.help
    empty = isinstance(default, (list, tuple)) and not default
    if required or empty or "default" in text or opt.base_kind is bool or (default is None and unset is None):
        return text.replace("%", "%%")
    shown = unset if default is None else ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
    return f"{text} (default: {shown})".replace("%", "%%")
