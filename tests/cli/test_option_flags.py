"""Flags made from options dataclasses (`posformer.cli.option_flags`), and every command's flags made so: its
parser's defaults are its dataclass's, and every flag explains itself."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.cli.program import build_parser
from posformer.utils.options import option


@dataclass
class Knobs:
    batches: list[int] = option(default_factory=lambda: [1, 8], help="batch sizes", flag="--batch", minimum=1)
    rows: list[str] = option(default_factory=lambda: ["a"], help="rows", choices=("a", "b", "c"))
    lr: float = option(1e-3, "learning rate", low=0, low_open=True)
    compile: bool = option(False, "compile")
    progress: bool = option(True, "hide the bars", flag="--no-progress")
    grouped: bool = option(True, "group by length")
    question: list[str] | None = option(None, "a question (repeatable)", repeatable=True)
    hidden: int = option(3, "set by a config only", flag=False)


def parser_of(**kwargs) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="knobs")
    add_option_flags(parser, Knobs, **kwargs)
    return parser


def test_no_flags_give_the_dataclass_defaults():
    assert options_from_args(Knobs, parser_of().parse_args([])) == Knobs()


def test_each_kind_of_value_is_read_as_declared():
    args = parser_of().parse_args(
        "--batch 2,4 16 --rows b,c --lr 0.5 --compile --no-progress --no-grouped --question x --question y".split()
    )
    got = options_from_args(Knobs, args)
    assert got == Knobs(
        batches=[2, 4, 16], rows=["b", "c"], lr=0.5, compile=True, progress=False, grouped=False, question=["x", "y"]
    )
    assert not hasattr(args, "hidden")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch", "1,0"], "argument --batch: 0 is not a positive integer"),
        (["--rows", "a,d"], "argument --rows: 'd' is not one of a, b, c"),
        (["--lr", "0"], "argument --lr: 0 is not a number > 0"),
        (["--lr", "nan"], "argument --lr: 'nan' is not a finite number"),
    ],
)
def test_a_bad_value_is_an_argparse_error_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parser_of().parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_unchecked_flags_read_the_type_only_and_overrides_and_order_apply():
    parser = parser_of(checked=False, only=("lr", "batches"), defaults={"lr": None}, unset="the preset's")
    assert parser.parse_args(["--lr", "-1", "--batch", "0"]).lr == -1.0
    assert [a.dest for a in parser._actions[1:]] == ["lr", "batches"]
    assert "(default: the preset's)" in parser.format_help()
    with pytest.raises(ValueError, match=r"declares no option\(s\) \['nope'\]"):
        parser_of(only=("nope",))


def _parsers(parser: argparse.ArgumentParser, prefix: str = "posformer"):
    """Every (name, parser) below `parser`, itself included."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{prefix} {name}")


def _benchmark_parsers():
    from posformer.cli.bench import BENCHMARKS, SPEED
    from posformer.cli.command import standalone_parser

    for flag, benchmark in {"": SPEED, **BENCHMARKS}.items():
        yield f"posformer bench {flag}".strip(), standalone_parser(benchmark, "posformer bench")


def test_every_flag_of_every_command_has_a_help_text():
    for name, parser in [*_parsers(build_parser()), *_benchmark_parsers()]:
        for action in parser._actions:
            if action.option_strings:
                assert action.help and action.help.strip(), f"{name} {action.option_strings[0]} has no help"


def test_every_benchmark_parses_to_its_dataclass_defaults():
    for name, parser in _benchmark_parsers():
        args = parser.parse_args([])
        options_class = args.run.options()
        assert options_from_args(options_class, args) == options_class(), name


@dataclass(kw_only=True)
class WithPlace:
    run_dir: str = option(help="the run", flag="RUN")
    steps: int = option(3, "steps", minimum=1)


def test_a_bare_flag_name_is_a_positional_argument(capsys):
    parser = argparse.ArgumentParser(prog="placed")
    add_option_flags(parser, WithPlace)
    assert options_from_args(WithPlace, parser.parse_args(["runs/x", "--steps", "2"])) == WithPlace(
        run_dir="runs/x", steps=2
    )
    assert "RUN" in parser.format_usage()
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert "the following arguments are required: RUN" in capsys.readouterr().err
