"""Every int option of every `posformer` command has a maximum (issue 58, item 4): a size, count or length too
large for any machine is refused while the command line is parsed (or the options checked), before native code
(torch's allocator, the Rust tokenizer library) is asked for it."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import typing

import pytest

from posformer.cli import option_flags, program
from posformer.cli.bench import BENCHMARKS
from posformer.cli.bench_models import SPEED
from posformer.cli.command import standalone_parser
from posformer.utils import limits
from posformer.utils.options import Option, options
from posformer.utils.validation import LARGEST_INT

# int options that may stay unbounded, each with the reason; none so far (a seed is bounded by MAX_SEED)
UNBOUNDED: set[tuple[str, str]] = set()


def cli_option_classes() -> list[type]:
    """Every options dataclass the `posformer` parsers are made from (every command's, every benchmark's), and the
    dataclasses their fields hold, in the order met."""
    found: list[type] = []
    original = option_flags.options

    def recording(cls: type) -> list[Option]:
        if cls not in found:
            found.append(cls)
        return original(cls)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(option_flags, "options", recording)
        program.build_parser()
        for benchmark in [SPEED, *BENCHMARKS.values()]:
            standalone_parser(benchmark, prog="posformer bench")
    for cls in found:  # grows while walked: nested option groups
        for kind in typing.get_type_hints(cls).values():
            for part in (kind, *typing.get_args(kind)):
                if isinstance(part, type) and dataclasses.is_dataclass(part) and part not in found:
                    found.append(part)
    return found


CLASSES = cli_option_classes()


def int_options(cls: type) -> list[Option]:
    """The options of `cls` that hold an int or a list of ints."""
    held = []
    for opt in options(cls):
        kind = opt.base_kind
        item = typing.get_args(kind)[0] if typing.get_origin(kind) in (list, tuple) else kind
        if item is int:
            held.append(opt)
    return held


def test_the_walk_reaches_every_kind_of_command() -> None:
    names = {cls.__name__ for cls in CLASSES}
    expected = {"TokenizerTrainOptions", "GenerateOptions", "QAJobOptions", "ExtendSettings", "ExtrapolationSettings"}
    assert expected | {"LongevalSettings", "SpeedOptions", "TrainerBenchOptions", "MemoryOptions"} <= names, names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_int_option_has_a_maximum_its_default_keeps(cls: type) -> None:
    for opt in int_options(cls):
        if (cls.__name__, opt.name) in UNBOUNDED:
            continue
        assert opt.spec.maximum is not None, f"{cls.__name__}.{opt.name} has no maximum"
        assert opt.spec.maximum <= LARGEST_INT, f"{cls.__name__}.{opt.name}"
        defaults = opt.default if isinstance(opt.default, (list, tuple)) else [opt.default]
        for value in (v for v in defaults if isinstance(v, int)):
            low = opt.spec.minimum if opt.spec.minimum is not None else -LARGEST_INT
            assert low <= value <= opt.spec.maximum, f"{cls.__name__}.{opt.name}={value}"


def test_the_shape_of_every_benchmark_model_is_declared_once() -> None:
    """Issue 57: the benchmarks' d_model / layers / heads / d_ff are `bench.options`' shape group's, not restated."""
    from posformer.bench.options import FeedForwardShapeOptions, ModelShapeOptions

    shaped = [cls for cls in CLASSES if cls.__module__.startswith("posformer.bench.") and "d_model" in _names(cls)]
    assert len(shaped) >= 6, shaped
    for cls in shaped:
        assert issubclass(cls, ModelShapeOptions), cls.__name__
        for opt in options(cls):
            if opt.name in ("d_model", "layers", "heads", "d_ff"):
                assert opt.spec is _spec(FeedForwardShapeOptions, opt.name), f"{cls.__name__}.{opt.name}"


def _names(cls: type) -> set[str]:
    return {opt.name for opt in options(cls)}


def _spec(cls: type, name: str) -> object:
    return next(opt.spec for opt in options(cls) if opt.name == name)


def parse_error(*argv: str) -> tuple[int, str]:
    """(exit status, stderr) of `posformer ARGV`, which must stop with an argparse error."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stopped:
        program.main(list(argv))
    return stopped.value.code, err.getvalue()


def test_a_huge_tokenizer_vocabulary_is_refused_before_the_rust_library_is_called(tmp_path, monkeypatch) -> None:
    from posformer.data import bpe

    def native(*args: object, **kwargs: object) -> None:
        raise AssertionError("the tokenizer library was called")

    monkeypatch.setattr(bpe, "train_byte_bpe", native)
    text = tmp_path / "text.txt"
    text.write_text("some text to learn from\n")
    argv = ["tokenizer", "train", str(text), "--out", str(tmp_path / "tok"), "--vocab-size"]
    status, err = parse_error(*argv, "2147483647")
    errors = [line for line in err.splitlines() if "error" in line]
    assert status == 2 and "Traceback" not in err
    assert errors == [
        f"posformer tokenizer train: error: argument --vocab-size: 2147483647 is not an integer in "
        f"[257, {limits.MAX_VOCAB}]"
    ]
    assert not (tmp_path / "tok").exists()


@pytest.mark.parametrize(
    "argv,words",
    [
        (["generate", "--model", "m", "--num-beams", "5000"], "argument --num-beams: 5000 is not an integer in"),
        (["bench", "--trainer", "--d-model", "70000"], "argument --d-model: 70000 is not an integer in [1, 65536]"),
        (["bench", "--layers", "2000"], "argument --layers: 2000 is not an integer in [1, 1024]"),
        (["bench", "--heads", "0"], "argument --heads: 0 is not a positive integer"),
        (["longeval", "m", "--batch-tokens", "2147483647"], "argument --batch-tokens: 2147483647 is not an integer"),
        (["info", "--preset", "llama", "--context", "2147483647"], "argument --context: 2147483647 is not an"),
    ],
)
def test_a_size_beyond_its_maximum_is_a_usage_error(argv: list[str], words: str) -> None:
    status, err = parse_error(*argv)
    assert status == 2 and words in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv,words",
    [
        (["qa", "train", "--d-model", "70000"], "--d-model=70000 is invalid: expected an integer in [1, 65536]"),
        (["extrapolate", "--layers", "2000"], "extrapolate: layers=2000 is invalid: expected an integer in [1, 1024]"),
        (["train", "--set", "data.seq_len=2147483647"], "data.seq_len=2147483647 is invalid: expected an integer in"),
    ],
)
def test_a_size_beyond_its_maximum_given_to_a_checked_command_is_named(tmp_path, argv, words: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = program.main([*argv, "--output-dir", str(tmp_path / "out")])
    assert status == 2 and words in err.getvalue() and "Traceback" not in err.getvalue(), err.getvalue()
    assert not (tmp_path / "out").exists()
