"""The documents of a corpus, read one at a time in a fixed order from the paths a user gives.

    for text in documents(["books/", "web.jsonl", "wiki_dataset/"], text_field="text"): ...

A path is read as what it holds:
  a directory saved by `datasets.Dataset.save_to_disk`   one document per row (`dataset_files`)
  a .json or .parquet file                               one document per record, read through `datasets`
  a .jsonl file                                          one document per line: a JSON object whose `text_field`
                                                         is a string; blank lines are skipped
  any other directory                                    its .txt, .jsonl and .parquet files and saved datasets,
                                                         recursively, sorted by relative path (component by
                                                         component); names starting with "." are skipped
  any other file                                         one document: its UTF-8 text (at most 1 GiB)

The paths are read in the order given, each in its own fixed order, so the stream of documents (and every token
window cut from it) is the same at every run: a resumed run sees the data it started with. Empty documents are
skipped. A bad record is a `ValueError` naming the file and its line (or row).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from posformer.data import dataset_files
from posformer.data.text_files import read_utf8
from posformer.utils.file_limits import LINE, limited_lines, not_blank
from posformer.utils.user_files import parse_json, regular_file

JSONL_SUFFIX = ".jsonl"
DIRECTORY_SUFFIXES = (".txt", JSONL_SUFFIX, ".parquet")  # what a plain directory contributes


def documents(paths: Sequence[str | Path], text_field: str = "text") -> Iterator[str]:
    """Every non-empty document of `paths`, in order; records keep their text in `text_field`."""
    for path in paths:
        for source in source_files(Path(not_blank(path, "a data path"))):
            yield from (text for text in _read(source, text_field) if text)


def source_files(path: Path) -> list[Path]:
    """The files (and saved datasets) `path` stands for, in reading order. A missing path, or a directory without
    any, is an error naming it."""
    regular_file(path, str(path), directory=True)
    if not path.is_dir() or dataset_files.is_saved_dataset(path):
        return [path]
    found = sorted(_walk(path), key=lambda p: p.relative_to(path).parts)
    if not found:
        raise ValueError(f"{path} holds no documents: no {', '.join(DIRECTORY_SUFFIXES)} file or saved dataset")
    return found


def needs_datasets(path: Path) -> bool:
    """Whether reading `path` itself (not a plain directory's contents) takes the `datasets` package."""
    return dataset_files.is_saved_dataset(path) or path.suffix in dataset_files.FILE_SUFFIXES


def _walk(directory: Path) -> Iterator[Path]:
    for entry in directory.iterdir():
        if entry.name.startswith("."):
            continue
        if entry.is_dir() and not dataset_files.is_saved_dataset(entry):
            yield from _walk(entry)
        elif entry.is_dir() or entry.suffix in DIRECTORY_SUFFIXES:
            yield entry


def _read(path: Path, text_field: str) -> Iterator[str]:
    if needs_datasets(path):
        return dataset_files.read(path, text_field)
    if path.suffix == JSONL_SUFFIX:
        return jsonl_documents(path, text_field)
    return iter([read_utf8(path, f"text file {path}")])


def jsonl_documents(path: Path, text_field: str = "text") -> Iterator[str]:
    """The `text_field` of each line of a JSON Lines file, read a line at a time (a line over `file_limits.LINE`
    is refused); a bad line is a `ValueError` naming the file and line."""
    for number, raw in limited_lines(path, str(path), LINE):
        where = f"{path}, line {number}"
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{where} is not valid UTF-8: {err}") from None
        if not line.strip():
            continue
        record = parse_json(line, where)
        yield record_text(record, text_field, where)


def record_text(record: object, text_field: str, where: str) -> str:
    """The string `record[text_field]`; anything else is a `ValueError` beginning with `where`."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object with a string field {text_field!r}, got {record!r:.60}")
    if text_field not in record:
        fields = ", ".join(map(str, record)) or "none"
        raise ValueError(f"{where} has no field {text_field!r} (its fields: {fields}); name the text field")
    text = record[text_field]
    if not isinstance(text, str):
        raise ValueError(f"{where}: field {text_field!r} is {text!r:.60}, not a string")
    return text
