"""The figures of the experiments' results, redrawn from their output directories (results.json).

  extrapolation (`posformer extrapolate`):         NAME-ppl.png       perplexity against length, 95% error bars
                                                                     (--seeds: the geometric mean, 95% over seeds)
  tasks (`posformer extrapolate --task`):          NAME-accuracy.png  exact match against length per encoding
                                                                     (--seeds: the mean, 95% over seeds)
  extend (`posformer extend`):                     NAME-ppl.png       perplexity against length per method
                                                   NAME-passkey.png   passkey heatmaps, length x depth
NAME is the directory's name. With two or more task directories, also tasks-summary.png (one panel per task).
The tables of the same directories: `posformer report`.
"""

from __future__ import annotations

from pathlib import Path

from posformer.utils.safe_write import make_dirs


def read_results(directory: str | Path) -> dict:
    """The results.json of an experiment directory (`experiments.reports.runs.read_run`) that has figures: not an
    extension over seeds, whose figures are its seeds' runs'."""
    from posformer.experiments.reports.runs import read_run
    from posformer.experiments.seeds.runs import is_over_seeds

    results = read_run(directory)
    if is_over_seeds(results) and results["benchmark"] == "extend":
        raise ValueError(
            f"--results {directory}: a run over seeds; give its seeds' runs ({directory}/seed-S), or `posformer "
            "report` it"
        )
    return results


def draw_results(directory: str | Path, out_dir: str | Path) -> list[Path]:
    """Draw the figures of the experiment in `directory` into `out_dir`; the paths written."""
    from posformer.experiments.extension import figure as extend_figure
    from posformer.experiments.extrapolation import figure as lm_figure
    from posformer.experiments.synthetic import figure as task_figure

    directory, out_dir = Path(directory), Path(out_dir)
    results = read_results(directory)
    kind, name = results["benchmark"], directory.resolve().name
    make_dirs(out_dir)
    if kind == "extrapolation":
        return [lm_figure.plot(results, out_dir / f"{name}-ppl.png")]
    if kind == "tasks":
        return [task_figure.plot(results, out_dir / f"{name}-accuracy.png")]
    return [  # extend, the last of `experiments.reports.runs.BENCHMARKS`
        extend_figure.plot_ppl(results, out_dir / f"{name}-ppl.png"),
        extend_figure.plot_passkey(results, out_dir / f"{name}-passkey.png"),
    ]


def draw_task_summary(directories: list[str | Path], out_dir: str | Path) -> list[Path]:
    """With two or more task runs among `directories`: tasks-summary.png, one panel per task; else nothing."""
    from posformer.experiments.synthetic import figure as task_figure

    found = [(Path(d).resolve().name, r) for d in directories if (r := read_results(d)).get("benchmark") == "tasks"]
    if len(found) < 2:
        return []
    tasks = [r["config"]["task"] for _, r in found]
    runs = {task if len(set(tasks)) == len(tasks) else name: r for task, (name, r) in zip(tasks, found)}
    return [task_figure.plot_summary(runs, Path(out_dir) / "tasks-summary.png")]
