"""Documents from local Hugging Face datasets, read through the `datasets` package (an optional dependency).

    read(Path("wiki"), "text")           # a directory `Dataset.save_to_disk` wrote: its rows, memory-mapped
    read(Path("shard-0.parquet"), "text")  # a .parquet or .json file, streamed (nothing is cached)

A .json file is parsed whole by `datasets`, so it is held to `file_limits.DATA`; a file `datasets` cannot read is a
`ValueError` naming it.

Rows come in the dataset's order. A row whose text field is not a string is a `ValueError` naming the path and the
row (counted from 1); a missing field names the columns there are.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from posformer.utils.file_limits import DATA, check_size
from posformer.utils.user_files import regular_file

FILE_SUFFIXES = {".json": "json", ".parquet": "parquet"}  # suffix -> the `datasets` builder that reads it
SAVED_DATASET_FILES = ("state.json", "dataset_info.json")  # what `Dataset.save_to_disk` writes beside the data
SAVED_DATASET_DICT = "dataset_dict.json"  # what `DatasetDict.save_to_disk` writes beside its splits
BATCH_ROWS = 1024


def import_datasets():
    """The `datasets` module; an `ImportError` saying how to install it when it is missing."""
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            "reading Hugging Face datasets (a save_to_disk directory, .json or .parquet files) needs the "
            "`datasets` package: pip install datasets"
        ) from err
    return datasets


def is_saved_dataset(path: Path) -> bool:
    """Whether directory `path` is what `Dataset.save_to_disk` or `DatasetDict.save_to_disk` wrote."""
    return (path / SAVED_DATASET_DICT).is_file() or all((path / name).is_file() for name in SAVED_DATASET_FILES)


def read(path: Path, text_field: str) -> Iterator[str]:
    """The `text_field` of every row of the saved dataset or data file at `path`."""
    datasets = import_datasets()
    if path.is_dir():
        if (path / SAVED_DATASET_DICT).is_file():
            splits = sorted(p.name for p in path.iterdir() if p.is_dir())
            raise ValueError(
                f"{path} holds a DatasetDict (splits: {', '.join(splits)}): give one split's directory, "
                f"e.g. {path / (splits[0] if splits else 'train')}"
            )
        dataset = datasets.load_from_disk(str(path))
        _check_field(dataset.column_names, text_field, path)
        rows = (row for batch in dataset.select_columns([text_field]).iter(BATCH_ROWS) for row in batch[text_field])
    else:
        builder = FILE_SUFFIXES[path.suffix]
        if builder == "json":  # `datasets` parses a JSON array whole
            check_size(regular_file(path, str(path)), str(path), DATA)
        with _named(path, builder):
            dataset = datasets.load_dataset(builder, data_files=[str(path)], split="train", streaming=True)
        rows = (_field(row, text_field, path, number) for number, row in enumerate(_rows(dataset, path, builder), 1))
    for number, text in enumerate(rows, 1):
        if not isinstance(text, str):
            raise ValueError(f"{path}, row {number}: field {text_field!r} is {text!r:.60}, not a string")
        yield text


@contextmanager
def _named(path: Path, builder: str) -> Iterator[None]:
    """Turn what `datasets` or pyarrow raise for a file they cannot read into a `ValueError` naming it."""
    try:
        yield
    except (ValueError, OverflowError, TypeError, OSError, KeyError, StopIteration) as err:
        reason = " ".join(str(err).split())[:300] or "no data (an empty file?)"
        raise ValueError(f"{path} cannot be read as a {builder} file: {type(err).__name__}: {reason}") from None


def _rows(dataset: Iterable[dict], path: Path, builder: str) -> Iterator[dict]:
    """The rows of a streamed `dataset` read from `path`, errors named by `_named`."""
    rows = iter(dataset)
    while True:
        with _named(path, builder):
            row = next(rows, None)
        if row is None:
            return
        yield row


def _check_field(columns: list[str] | None, text_field: str, path: Path) -> None:
    if columns is not None and text_field not in columns:
        raise ValueError(
            f"{path} has no column {text_field!r} (its columns: {', '.join(columns)}); name the text field"
        )


def _field(row: dict, text_field: str, path: Path, number: int) -> object:
    if text_field not in row:
        raise ValueError(f"{path}, row {number} has no field {text_field!r} (its fields: {', '.join(row)})")
    return row[text_field]
