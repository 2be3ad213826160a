"""Options declared once (`posformer.utils.options`): the fields' specs, inherited specs, and the checks of an
object built in Python."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from posformer.utils.options import check_options, option, options


@dataclass
class Shape:
    options_group: ClassVar[str] = "shape"

    batch: int = option(8, "sequences per step", minimum=1)
    share: float = option(0.5, "a share", low=0, high=1, low_open=True)
    sizes: list[int] = option(default_factory=lambda: [1, 2], help="sizes", minimum=1)
    mode: str = option("a", "the mode", choices=("a", "b"))
    limit: float | None = option(None, "any finite number, or unset")


@dataclass
class Smaller(Shape):
    batch: int = 2
    extra: bool = option(False, "a switch")


def test_a_redeclared_default_keeps_the_base_spec_and_group():
    by_name = {opt.name: opt for opt in options(Smaller)}
    assert by_name["batch"].default == 2
    assert by_name["batch"].spec.help == "sequences per step" and by_name["batch"].spec.minimum == 1
    assert by_name["batch"].group == "shape" and by_name["extra"].group is None
    assert by_name["sizes"].default == [1, 2] and by_name["limit"].optional


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(batch=0), "batch=0 is invalid: expected a positive integer"),
        (dict(batch=True), "batch=True is invalid: expected a positive integer"),
        (dict(share=0.0), "share=0.0 is invalid: expected a number in (0, 1]"),
        (dict(sizes=[1, 0]), "sizes=0 is invalid: expected a positive integer"),
        (dict(mode="c"), "mode='c' is invalid: expected one of a, b"),
        (dict(limit=float("nan")), "limit=nan is invalid: expected a finite number"),
    ],
)
def test_a_value_outside_the_declared_range_is_named(changes, message):
    with pytest.raises(ValueError) as error:
        check_options(Smaller(**changes), prefix="")
    assert str(error.value) == message


def test_unset_optional_values_and_defaults_pass_and_names_can_be_flags():
    check_options(Smaller())
    check_options(Smaller(limit=3.5, share=1.0, sizes=[4]))
    with pytest.raises(ValueError, match=r"^--batch=0 is invalid"):
        check_options(Smaller(batch=0), name_of=lambda name: "--" + name)
