"""Failures that `posformer.cli.program.main` turns into one line besides the `Exception`s it knows: a command line
that is no text, and a panic in a Rust library (the Hugging Face tokenizer, safetensors), which pyo3 raises as a
`PanicException`, a `BaseException` that an `except Exception` does not catch.
"""

from __future__ import annotations

from types import TracebackType

from posformer.utils.unicode_text import surrogate_in
from posformer.utils.validation import excerpt

RUST_LIBRARIES = (  # (the start of a Python module's name, what a message calls the library it calls into)
    ("tokenizers", "the tokenizer (the Rust `tokenizers` library)"),
    ("transformers.tokenization", "the tokenizer (the Rust `tokenizers` library)"),
    ("safetensors", "the safetensors reader"),
)


def argument_problem(argv: list[str]) -> str | None:
    """What is wrong with the first argument of `argv` that is not UTF-8 text (Python holds its bytes as lone
    surrogates, which no tokenizer or file takes); None when every one is text."""
    for i, arg in enumerate(argv):
        code = surrogate_in(arg)
        if code is None:
            continue
        flag, _, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if not flag and i and argv[i - 1].startswith("-"):
            flag = argv[i - 1]
        what = f"the value of {flag}" if flag else "the argument"
        return f"{what} {excerpt(value)} is not UTF-8 text: expected UTF-8 (check the encoding of the shell or script)"
    return None


def is_rust_panic(err: BaseException) -> bool:
    """Whether `err` is the `PanicException` of a Rust library called through pyo3."""
    kind = type(err)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def panic_line(err: BaseException) -> str:
    """One line for a Rust panic: the library that panicked (found from the last Python frame that called it), its
    tokenizer's directory when it is one, and the panic's message."""
    library, source = _panicked_in(err.__traceback__)
    where = f" of {source}" if source else ""
    message = str(err).strip().splitlines()[0] if str(err).strip() else "no message"
    return (
        f"{library}{where} failed: {message} (a panic in its Rust code: a regular expression or setting of its files, "
        "or the input, is one it cannot handle)"
    )


def _panicked_in(trace: TracebackType | None) -> tuple[str, str | None]:
    """(what a message calls the library that panicked, the directory of the tokenizer that called it or None),
    from the frames of `trace`."""
    frames = []
    while trace is not None:
        frames.insert(0, trace.tb_frame)  # innermost first
        trace = trace.tb_next
    modules = [str(frame.f_globals.get("__name__", "")) for frame in frames]
    library = next((name for m in modules for start, name in RUST_LIBRARIES if m.startswith(start)), "a Rust library")
    sources = (getattr(frame.f_locals.get("self"), "name_or_path", None) for frame in frames)
    return library, next((source for source in sources if isinstance(source, str) and source), None)
