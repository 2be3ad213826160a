"""What a dataset of the shared data folder is made of: files to download (`Download`: a URL, a size and a sha256),
files made from them (`Derived`), and the `Dataset` that groups them with its license and its readers. The
catalog of the project's datasets is `posformer.data.catalog`; `posformer.data.fetch` downloads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

GITHUB_RAW = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class Download:
    """A file downloaded as it is: saved as DIR/<dataset>/`name`, checked against `size` and `sha256`.

    origin: where it comes from, in words (a repository, commit and path, or a site).
    """

    name: str
    url: str
    size: int
    sha256: str
    origin: str

    @classmethod
    def from_github(cls, name: str, repo: str, commit: str, path: str, size: int, sha256: str) -> Download:
        """`path` of github.com/`repo` at `commit` (a full 40-digit commit), from raw.githubusercontent.com."""
        return cls(
            name, f"{GITHUB_RAW}/{repo}/{commit}/{path}", size, sha256, f"github.com/{repo} `{path}` at {commit}"
        )


@dataclass(frozen=True)
class Derived:
    """A file made from another file of its dataset: `make(bytes of made_from) -> bytes`, checked against `size` and
    `sha256` as a download is. how: the derivation, in words."""

    name: str
    made_from: str
    make: Callable[[bytes], bytes]
    size: int
    sha256: str
    how: str


@dataclass(frozen=True)
class Dataset:
    """A named dataset: the folder DIR/`name`/ of the shared data folder and the files it holds.

    summary: what it is, in a sentence. read_by: which commands read it. notes: what differs from the shared copy
    or cannot be reproduced, for its SOURCE.md and `posformer data fetch --help`.
    """

    name: str
    title: str
    summary: str
    license: str
    read_by: str
    downloads: tuple[Download, ...]
    derived: tuple[Derived, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[Download | Derived, ...]:
        return (*self.downloads, *self.derived)

    @property
    def required(self) -> tuple[Download | Derived, ...]:
        """The files a complete copy holds: all but those downloaded only to make another (a `Derived` file's
        `made_from`), which are fetched when that file has to be made."""
        sources = {f.made_from for f in self.derived}
        return tuple(f for f in self.files if f.name not in sources)

    @property
    def size(self) -> int:
        """The bytes of its `required` files together."""
        return sum(f.size for f in self.required)

    def source_markdown(self) -> str:
        """The SOURCE.md written beside the fetched files: where each file came from, its size and sha256."""
        lines = [
            f"# {self.title}",
            "",
            self.summary,
            "",
            f"License: {self.license}",
            "",
            f"Read by: {self.read_by}",
            "",
        ]
        lines += [
            "Fetched by `posformer data fetch`: every file it writes is checked against its sha256 below. A file "
            "another is made from is downloaded only when that one has to be made.",
            "",
        ]
        lines += ["| file | bytes | sha256 | source |", "|---|---:|---|---|"]
        for f in self.downloads:
            lines.append(f"| {f.name} | {f.size:,} | {f.sha256} | {f.origin}: {f.url} |")
        for f in self.derived:
            lines.append(f"| {f.name} | {f.size:,} | {f.sha256} | made from {f.made_from}: {f.how} |")
        if self.notes:
            lines += ["", "Notes:", *(f"- {note}" for note in self.notes)]
        return "\n".join(lines) + "\n"
