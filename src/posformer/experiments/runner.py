"""The runner every experiment shares: it owns the output directory (`layout.ExperimentLayout`).

It refuses a directory another run holds (`train.run_lock`), sets the CPU threads, opens the results recorded
there (a resume with other settings is refused) or starts a fresh record, and writes results.json, results.md and
the figures after each row, atomically."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from posformer.experiments.layout import ExperimentLayout
from posformer.train.run_lock import check_output_dir
from posformer.utils.options import options
from posformer.utils.provenance import provenance
from posformer.utils.safe_write import write_json_atomic, write_text_atomic
from posformer.utils.user_files import read_mapping_file

IGNORED_FOR_RESUME = ("positions", "methods", "threads")  # rows (methods) may be added to a finished run


def versions() -> dict[str, str]:
    """The versions of Python and of the packages a result depends on, as results.json records them."""
    found = {"python": platform.python_version()}
    for name in ("posformer", "torch", "transformers", "tokenizers"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


class Runner:
    """One experiment's output directory: `markdown(results)` is its results.md, `draw(results, layout)` its
    figures (once a row is recorded)."""

    def __init__(
        self,
        output_dir: str | Path,
        threads: int | None,
        markdown: Callable[[dict], str],
        draw: Callable[[dict, ExperimentLayout], None] | None = None,
    ):
        self.layout = ExperimentLayout(Path(output_dir))
        self.markdown, self.draw = markdown, draw
        check_output_dir(self.layout.root)
        if threads is not None:
            torch.set_num_threads(threads)

    def open(self, settings: Any, benchmark: str) -> dict:
        """The results recorded here (checked against `settings`, a dataclass with `to_dict`), or a fresh record
        of `benchmark`."""
        path, config = self.layout.results_json, settings.to_dict()
        if not path.is_file():
            return {
                "benchmark": benchmark,
                "config": config,
                "data": {},
                "rows": {},
                "versions": versions(),
                "provenance": [provenance()],
            }
        saved = read_mapping_file(path, "the results file")
        old = saved.get("config") if isinstance(saved.get("config"), dict) else {}
        defaults = {declared.name: declared.default for declared in options(type(settings))}
        differ = sorted(
            k
            for k in set(old) | set(config)
            if k not in IGNORED_FOR_RESUME
            and old.get(k, defaults.get(k)) != config.get(k)  # a knob added since, at its default, still matches
        )
        if differ:
            raise ValueError(
                f"{self.layout.root} holds results of a different configuration (differing keys: "
                f"{', '.join(differ)}; saved { ({k: old.get(k) for k in differ}) }); use the same "
                "settings or another --output-dir"
            )
        saved["config"] = config
        made_by = saved.setdefault("provenance", [])
        if not made_by or made_by[-1] != provenance():  # a resume by another command or commit is on record too
            made_by.append(provenance())
        return saved

    def run_rows(
        self,
        results: dict,
        names: Iterable[str],
        run_one: Callable[[str], dict[str, dict]],
        log: Callable[[str], None],
        started: float | None = None,
        recorded: Callable[[dict, str], bool] | None = None,
    ) -> None:
        """`run_one(name)` -> {row: record} for each of `names` not `recorded` yet (default: a row of that name),
        saving after each. With `started` (a `time.monotonic()`), results["wall_s"] adds up the time since it."""
        for name in names:
            if recorded(results, name) if recorded is not None else name in results["rows"]:
                log(f"{name}: already recorded in {self.layout.results_json}, skipped")
                continue
            results["rows"].update(run_one(name))
            if started is not None:
                results["wall_s"] = round(results.get("wall_s", 0.0) + time.monotonic() - started, 2)
                started = time.monotonic()
            self.save(results)

    def save(self, results: dict, draw: bool = True) -> None:
        """results.json and results.md, then (with `draw` and a row recorded) the figures."""
        write_json_atomic(self.layout.results_json, results)
        write_text_atomic(self.layout.results_md, self.markdown(results))
        if draw and self.draw is not None and results["rows"]:
            self.draw(results, self.layout)
