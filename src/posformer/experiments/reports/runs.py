"""The markdown of recorded experiment runs, whatever made them: one run's tables, or the summary of several
(`posformer report`). A run is an output directory of `posformer extrapolate` (with or without --task), or
`posformer extend`, made with one seed or with --seeds (`seeds.runs`).
"""

from __future__ import annotations

from pathlib import Path

from posformer.experiments.seeds.runs import is_over_seeds
from posformer.utils.user_files import read_mapping_file

BENCHMARKS = ("extrapolation", "tasks", "extend")


def read_run(directory: str | Path) -> dict:
    """The results.json of the run in `directory`, checked to hold at least one recorded row (or seed)."""
    path = Path(directory) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory}: no results.json (give the --output-dir of `posformer extrapolate` or `posformer extend`)"
        )
    results = read_mapping_file(path, "the results file")
    if results.get("benchmark") not in BENCHMARKS:
        raise ValueError(f"{path}: benchmark {results.get('benchmark')!r}; expected one of {', '.join(BENCHMARKS)}")
    if not (results.get("per_seed") if is_over_seeds(results) else results.get("rows")):
        raise ValueError(f"{path}: nothing recorded yet")
    return results


def run_markdown(results: dict) -> str:
    """The results.md of one run (over seeds or not)."""
    from posformer.experiments.extension import report as extend_report
    from posformer.experiments.extension import seed_report as extend_seed_report
    from posformer.experiments.extrapolation import report as lm_report
    from posformer.experiments.extrapolation import seed_report as lm_seed_report
    from posformer.experiments.synthetic import report as task_report
    from posformer.experiments.synthetic import seed_report as task_seed_report

    seeded = is_over_seeds(results)
    if results["benchmark"] == "tasks":
        return (task_seed_report if seeded else task_report).markdown(results)
    if results["benchmark"] == "extrapolation":
        return (lm_seed_report if seeded else lm_report).markdown(results)
    return (extend_seed_report if seeded else extend_report).markdown(results)


def runs_markdown(runs: dict[str, dict]) -> str:
    """{name: results} -> one run's tables, or, for task runs of distinct tasks, the summary over the tasks (mean
    reciprocal rank beside Kazemnejad et al.), or else each run's tables one after the other."""
    from posformer.experiments.synthetic import report as task_report
    from posformer.experiments.synthetic import seed_report as task_seed_report

    found = list(runs.values())
    if len(found) == 1:
        return run_markdown(found[0])
    if all(r["benchmark"] == "tasks" for r in found):
        tasks = [r["config"]["task"] for r in found]
        if len(set(tasks)) == len(tasks):  # one run a task: each named by its task
            runs = dict(zip(tasks, found))
        seeded = [is_over_seeds(r) for r in found]
        if all(seeded):
            return task_seed_report.summary_markdown(runs)
        if not any(seeded):
            return task_report.summary_markdown(runs)
        raise ValueError("the task runs mix one-seed runs with runs over seeds; give runs of one kind")
    return "\n".join(run_markdown(r) for r in found)


def made_by(runs: dict[str, dict]) -> list[str]:
    """The command lines and commits recorded by the runs (over seeds: each seed's too), in order, each once; older
    runs recorded none."""
    lines: list[str] = []
    for name, results in runs.items():
        records = [
            *results.get("provenance", []),
            *(p for r in results.get("per_seed", {}).values() for p in r.get("provenance", [])),
        ]
        if not records:
            lines.append(f"{name}: no command recorded (made before posformer recorded one)")
        for record in records:
            line = f"`{record['command']}` at commit {record['commit']}"
            if line not in lines:
                lines.append(line)
    return lines
