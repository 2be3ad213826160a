"""Downloading a named dataset of the catalog (`posformer.data.catalog`) into a data folder: DIR/NAME/.

Each file is streamed to a temporary file beside its place, its sha256 checked, then renamed into place with the
mode the umask gives: a failed or interrupted download never leaves a half-written file. A file already present
with the right sha256 is kept. A `Derived` file is made from its source after the downloads and checked the same
way. A mirror (`mirror`: a folder laid out like a data folder, or a URL of one) replaces every file's own URL by
MIRROR/NAME/FILE; a mirror holds the files the folder ends with, so a derived file is copied from it, not made.
"""

from __future__ import annotations

import hashlib
import http.client
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from posformer.data.catalog import dataset
from posformer.data.shared import default_data_dir
from posformer.data.sources import Dataset, Derived, Download
from posformer.utils.progress import ProgressBar, progress_bar
from posformer.utils.safe_write import make_dirs, write_text_atomic, writing_file

TIMEOUT_S = 60.0
CHUNK = 1 << 20
NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError)
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class FetchError(OSError):
    """A file that could not be fetched or made; the message names it, where it came from and what to do."""


@dataclass
class Fetched:
    """What `fetch` did: the dataset's folder, the files it downloaded or made, and those already in place."""

    folder: Path
    fetched: list[str]
    present: list[str]


def fetch(
    name: str,
    to: str | Path | None = None,
    mirror: str | None = None,
    timeout: float = TIMEOUT_S,
    progress: bool = True,
) -> Fetched:
    """Fetch the dataset `name` into `to`/`name`/ (default `to`: the data folder the presets read,
    `posformer.data.shared.default_data_dir`), then write its SOURCE.md there.

    mirror: a folder laid out like a data folder, or a URL (http, https, file) of one, read instead of each file's
        own URL. timeout: seconds to wait for a server. A failure is a `FetchError` naming the file and the URL.
    """
    data = dataset(name)
    root = Path(to if to is not None else default_data_dir())
    folder = make_dirs(root / data.name, root)  # DIR/NAME is a real folder in DIR, not a link out of it
    missing = [f for f in data.required if not _in_place(folder / f.name, f)]
    downloads, derived = _plan(data, missing, folder, mirror)
    if downloads:
        total = sum(f.size for f in downloads)
        with progress_bar(total=total, unit="B", unit_scale=True, unit_divisor=1024, disable=not progress) as bar:
            for f in downloads:
                bar.set_description(f"{data.name}/{f.name}", refresh=False)
                _download(data, f, folder, bar, timeout)
    for f in derived:
        _make(data, f, folder)
    write_text_atomic(folder / "SOURCE.md", data.source_markdown())
    return Fetched(folder, [f.name for f in missing], [f.name for f in data.required if f not in missing])


def mirror_url(mirror: str, name: str, file: str) -> str:
    """The URL of `file` of the dataset `name` on `mirror` (a URL, or a folder: its file:// URL)."""
    base = mirror.rstrip("/") if URL.match(mirror) else Path(mirror).resolve().as_uri()
    return f"{base}/{quote(name)}/{quote(file)}"


def sha256_file(path: str | Path) -> str:
    """The sha256 of the file at `path`, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _in_place(path: Path, f: Download | Derived) -> bool:
    return path.is_file() and path.stat().st_size == f.size and sha256_file(path) == f.sha256


def _plan(
    data: Dataset, missing: list[Download | Derived], folder: Path, mirror: str | None
) -> tuple[list[Download], list[Derived]]:
    """(the files to download, the files to make) to fill in `missing`."""
    if mirror is not None:
        return [Download(f.name, mirror_url(mirror, data.name, f.name), f.size, f.sha256, "") for f in missing], []
    derived = [f for f in missing if isinstance(f, Derived)]
    sources = {f.made_from for f in derived}
    needed = [f for f in data.downloads if f.name in sources and not _in_place(folder / f.name, f)]
    return [f for f in data.downloads if f in missing or f in needed], derived


def _by_hand(data: Dataset, name: str, sha256: str, folder: Path) -> str:
    return (
        f"Check the network and run the command again (files already fetched are kept), give --mirror a folder or "
        f"URL that holds {data.name}/{name}, or copy the file by hand into {folder}/ (its sha256 must be {sha256})"
    )


def _download(data: Dataset, f: Download, folder: Path, bar: ProgressBar, timeout: float) -> None:
    """Stream `f` into place in `folder`, checked against its size and sha256."""
    with writing_file(folder / f.name) as out:
        size, digest = _stream(data, f, out, bar, timeout, folder)
        if (size, digest) != (f.size, f.sha256):
            got = f"more than {f.size:,} bytes" if size > f.size else f"{size:,} bytes with sha256 {digest}"
            raise FetchError(
                f"{data.name}/{f.name} from {f.url} is not the expected file: got {got}, expected {f.size:,} bytes; "
                f"nothing was written. {_by_hand(data, f.name, f.sha256, folder)}"
            )


def _stream(
    data: Dataset, f: Download, out: BinaryIO, bar: ProgressBar, timeout: float, folder: Path
) -> tuple[int, str]:
    """(bytes read, their sha256) of `f.url` written to `out`; stops once past the expected size."""
    digest, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(f.url, timeout=timeout) as response:
            while size <= f.size and (chunk := response.read(CHUNK)):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
                bar.update(len(chunk))
    except NETWORK_ERRORS as err:
        if isinstance(err, urllib.error.HTTPError):
            reason = f"HTTP {err.code} {err.reason}"
        else:
            reason = str(err.reason if isinstance(err, urllib.error.URLError) else err) or type(err).__name__
        what = f"could not download {data.name}/{f.name} from {f.url}: {reason}"
        raise FetchError(f"{what}. {_by_hand(data, f.name, f.sha256, folder)}") from err
    return size, digest.hexdigest()


def _make(data: Dataset, f: Derived, folder: Path) -> None:
    """Make `f` from its source in `folder`, check it, write it into place in one rename."""
    source = folder / f.made_from
    made = f.make(source.read_bytes())
    digest = hashlib.sha256(made).hexdigest()
    if (len(made), digest) != (f.size, f.sha256):
        raise FetchError(
            f"{data.name}/{f.name} made from {source} is not the recorded file: got {len(made):,} bytes with sha256 "
            f"{digest}, expected {f.size:,} bytes with sha256 {f.sha256}; nothing was written. {source} itself is "
            f"checked and kept and can be read instead, or copy {f.name} by hand into {folder}/"
        )
    with writing_file(folder / f.name) as out:
        out.write(made)
