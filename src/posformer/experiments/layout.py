"""Where an experiment (`extrapolate`, `extrapolate --task`, `extend`) keeps its files: the one place that knows
the output directory's layout. An extrapolation's:

    OUTPUT/
      results.json   every row's numbers (under "rows"), the resolved settings, the data, the versions
      results.md     the perplexity and ratio tables
      ppl.png        perplexity against evaluation length (a task run: accuracy.png; an extension: its figures)
      tokenizer/     the BPE tokenizer every row shares
      rows/ROW/      row ROW's Trainer run: checkpoints/ (the newest valid one loads as ROW's model, so
                     `posformer generate --model OUTPUT/rows/ROW` works), metrics.jsonl (its training log),
                     run_config.yaml and the tokenizer files

A directory holding `rows/` is an experiment directory: `posformer plot --checkpoint OUTPUT` draws each row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from posformer.utils.safe_write import make_dirs

ROWS_DIR = "rows"


@dataclass(frozen=True)
class ExperimentLayout:
    """The paths of one experiment's output directory `root`."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def results_json(self) -> Path:
        return self.root / "results.json"

    @property
    def results_md(self) -> Path:
        return self.root / "results.md"

    @property
    def plot_png(self) -> Path:
        return self.root / "ppl.png"

    @property
    def tokenizer_dir(self) -> Path:
        return self.root / "tokenizer"

    @property
    def rows_dir(self) -> Path:
        return self.root / ROWS_DIR

    def row_dir(self, row: str) -> Path:
        """Row `row`'s Trainer run directory: its checkpoints and its training log."""
        return self.rows_dir / row

    def new_row_dir(self, row: str) -> Path:
        """`row_dir(row)`, created for writing: each folder below `root` a real one (a symlink is refused)."""
        return make_dirs(self.row_dir(row), self.root)

    def is_experiment(self) -> bool:
        """Whether `root` is an experiment directory (it holds `rows/`)."""
        return self.rows_dir.is_dir()

    def row_dirs(self) -> list[Path]:
        """The run directory of every row present on disk, sorted by name."""
        return sorted(path for path in self.rows_dir.iterdir() if path.is_dir())
