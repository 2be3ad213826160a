"""The figures of the experiments' results, redrawn from their output directories (results.json).

  extrapolation (`posformer extrapolate`):         NAME-ppl.png       perplexity against length, 95% bands
  tasks (`posformer extrapolate --task`):          NAME-accuracy.png  exact match against length per encoding
  extend (`posformer extend`):                     NAME-ppl.png       perplexity against length per method
                                                   NAME-passkey.png   passkey heatmaps, length x depth
NAME is the directory's name.
"""

from __future__ import annotations

from pathlib import Path

from posformer.user_files import read_mapping_file


def draw_results(directory: str | Path, out_dir: str | Path) -> list[Path]:
    """Draw the figures of the experiment in `directory` into `out_dir`; the paths written."""
    from posformer.experiments.extension import report as extend_report
    from posformer.experiments.extrapolation import report as lm_report
    from posformer.experiments.tasks import report as task_report

    directory, out_dir = Path(directory), Path(out_dir)
    path = directory / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"--results {directory}: no results.json (give the --output-dir of `posformer "
                                "extrapolate` or `posformer extend`)")
    results = read_mapping_file(path, "--results")
    kind, name = results.get("benchmark"), directory.resolve().name
    if not results.get("rows"):
        raise ValueError(f"--results {path}: no row recorded yet")
    out_dir.mkdir(parents=True, exist_ok=True)
    if kind == "extrapolation":
        return [lm_report.plot(results, out_dir / f"{name}-ppl.png")]
    if kind == "tasks":
        return [task_report.plot(results, out_dir / f"{name}-accuracy.png")]
    if kind == "extend":
        return [extend_report.plot_ppl(results, out_dir / f"{name}-ppl.png"),
                extend_report.plot_passkey(results, out_dir / f"{name}-passkey.png")]
    raise ValueError(f"--results {path}: unknown benchmark {kind!r}; expected extrapolation, tasks or extend")
