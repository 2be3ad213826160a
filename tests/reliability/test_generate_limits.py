"""`--max-new-tokens` is bounded where it is parsed (a documented maximum, an argparse error naming the flag), and
`generate()` names max_new_tokens, not an internal cache capacity, when the prompt and the new tokens cannot fit in
the positions a cache holds. An option declares its maximum beside its minimum (`option(maximum=...)`), so the
flag and the options' own check refuse the same values."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import pytest
import torch

import posformer as pf
from posformer.cli.generate import MAX_NEW_TOKENS, GenerateOptions
from posformer.cli.option_flags import add_option_flags
from posformer.cli.program import build_parser
from posformer.utils.options import check_options, option
from posformer.utils.validation import LARGEST_INT


def parse_error(*argv: str) -> str:
    """The argparse error of `posformer ARGV` (it must be one)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(list(argv))
    assert exit_info.value.code == 2
    return err.getvalue()


@pytest.mark.parametrize("value", ["2147483647", "2147483646", str(MAX_NEW_TOKENS + 1), "1" + "0" * 30])
def test_max_new_tokens_beyond_the_maximum_is_refused_by_the_flag(value: str) -> None:
    err = parse_error("generate", "--model", "m", "--max-new-tokens", value)
    assert f"argument --max-new-tokens: {value} is not an integer in [0, {MAX_NEW_TOKENS}]" in err
    assert "capacity" not in err


def test_the_maximum_is_accepted_and_documented(capsys) -> None:
    args = build_parser().parse_args(["generate", "--model", "m", "--max-new-tokens", str(MAX_NEW_TOKENS)])
    assert args.max_new_tokens == MAX_NEW_TOKENS
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--help"])
    assert "tokens generated after the prompt, at most 1,000,000" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_generate_names_max_new_tokens_when_the_cache_cannot_hold_them(arch: str) -> None:
    from tests.conftest import tiny

    model = pf.Transformer(tiny(arch, position="rope" if arch == "decoder" else "t5")).eval()
    prompt = torch.tensor([[3, 4, 5]])
    prefix = 3 if arch == "decoder" else 1
    with pytest.raises(ValueError) as caught:
        model.generate(prompt, max_new_tokens=LARGEST_INT - prefix + 1)
    said = str(caught.value)
    assert said.startswith(f"max_new_tokens={LARGEST_INT - prefix + 1} is invalid: expected an integer in [0, ")
    assert "capacity" not in said


@dataclass
class Bounded:
    count: int = option(3, "how many", minimum=1, maximum=10)


def test_an_option_maximum_bounds_the_flag_and_the_check() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="p")
    add_option_flags(parser, Bounded)
    assert parser.parse_args(["--count", "10"]).count == 10
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        parser.parse_args(["--count", "11"])
    assert "argument --count: 11 is not an integer in [1, 10]" in err.getvalue()
    with pytest.raises(ValueError, match=r"^count=11 is invalid: expected an integer in \[1, 10\]$"):
        check_options(Bounded(count=11))
    check_options(GenerateOptions(model="m", max_new_tokens=MAX_NEW_TOKENS))
    with pytest.raises(ValueError, match="max_new_tokens=1000001 is invalid"):
        check_options(GenerateOptions(model="m", max_new_tokens=MAX_NEW_TOKENS + 1))
