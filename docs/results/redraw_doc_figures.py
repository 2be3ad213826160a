"""Redraw the docs' result figures whose recorded runs are not kept, from the tables the pages hold.

    .venv/bin/python docs/results/redraw_doc_figures.py [OUT_DIR]    # default: docs/figures

Each figure is drawn by the code `posformer plot --results` uses (`experiments.extrapolation.figure`,
`experiments.synthetic.figure`), from the numbers of the generated block (or recorded results.md) that the page
prints beside it, read back by `posformer.plots.doc_tables`: the same numbers, rounded as printed. With the runs at
hand, `posformer plot --output-dir figs --results runs/seeds/...` draws the same figures from results.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

from posformer.experiments.doc_blocks import read_block
from posformer.plots.doc_tables import lm_figure, task_figure

DOCS = Path(__file__).resolve().parents[1]
FIGURES = DOCS / "figures"

# (figure, page, generated block or None for a whole recorded results.md, drawing)
REDRAWN = [
    ("extrapolation_bytes_seeds.png", "extrapolation.md", "lm-bytes", lm_figure),
    ("extrapolation_bytes_2024_seeds.png", "extrapolation.md", "lm-bytes-2024", lm_figure),
    ("extrapolation_bytes_2026_seeds.png", "extrapolation.md", "lm-bytes-2026", lm_figure),
    ("extrapolation_gpu.png", "results/extrapolate-gpu-400-steps.md", None, lm_figure),
    ("tasks_quick_seeds.png", "tasks.md", "tasks-quick", task_figure),
]


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, page, block, draw in REDRAWN:
        text = (DOCS / page).read_text(encoding="utf-8") if block is None else read_block(DOCS / page, block)
        where = f"docs/{page}" + (f", block {block}" if block else "")
        print(draw(text, out_dir / name, where), "from", where)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else FIGURES)
