"""One experiment over several seeds: each seed a whole run of its own in OUTPUT/seed-S/, and OUTPUT/results.json
the record of all of them.

    OUTPUT/
      results.json   {"benchmark", "seeds", "config" (the settings, seed aside), "per_seed": {S: that seed's
                     results.json}, "provenance"}: what `posformer report` and the docs' tables read
      results.md     the tables over seeds: each measure's mean and Student-t interval, comparisons seed by seed
      seed-S/        seed S's run, as a one-seed run writes it (its rows, results.json, results.md, figures)

Within a seed the rows share the data order and initial weights, as in a one-seed run; seed S differs from
seed S' in both. Each seed's run resumes on its own, so re-running into OUTPUT continues where it stopped. Seeds
can also run side by side, one process each (`--seeds 0,` and `--seeds 1,` into the same OUTPUT, one per core):
each adds its seed to the record and keeps the seeds the others recorded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from posformer.utils.provenance import provenance
from posformer.utils.safe_write import make_dirs, write_json_atomic, write_text_atomic
from posformer.utils.user_files import read_mapping_file

SEED_DIR_PREFIX = "seed-"


def parse_seeds(text: str, first: int) -> list[int]:
    """--seeds: 'N' (the seeds first .. first + N - 1) or a comma-separated list of distinct seeds ('0,1,2'; one
    seed alone as a list: '2,')."""
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        raise ValueError(f"--seeds {text!r}: expected a count (3) or comma-separated seeds (0,1,2)") from None
    if not numbers or any(n < 0 for n in numbers):
        raise ValueError(f"--seeds {text!r}: expected a count >= 1 or seeds >= 0")
    is_list = "," in str(text)
    if not is_list and numbers[0] < 1:
        one = numbers[0]
        raise ValueError(f"--seeds {text!r}: a count is at least 1; seed {one} alone is the list '{one},'")
    seeds = numbers if is_list else list(range(first, first + numbers[0]))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r}: a seed is listed twice")
    return seeds


def seed_dir(root: str | Path, seed: int) -> Path:
    """Seed `seed`'s run directory under the experiment directory `root`."""
    return Path(root) / f"{SEED_DIR_PREFIX}{seed}"


def seed_runs(record: dict) -> list[dict]:
    """Each seed's results, in the record's order of seeds."""
    return list(record["per_seed"].values())


def rows_in_order(runs: list[dict], positions: list[str]) -> list[str]:
    """Every row a seed recorded, in the order of `positions` (the run's rows; one scored at eval time, as
    rope+yarn, right after its own), the others after them: the same order whichever seed ran first."""
    found = list(dict.fromkeys(row for run in runs for row in run["rows"]))
    rank = {name: index for index, name in enumerate(positions)}
    return sorted(found, key=lambda row: rank.get(row.split("+")[0], len(rank)))


def is_over_seeds(results: dict) -> bool:
    """Whether `results` is the record of several seeds (else: one run's results.json)."""
    return "per_seed" in results


def _record_file(root: Path, benchmark: str) -> dict:
    """OUTPUT/results.json (checked: a run over seeds of `benchmark`), else {}."""
    if (root / "rows").is_dir():
        raise ValueError(f"{root} holds a one-seed run; give --seeds runs another --output-dir")
    path = root / "results.json"
    if not path.is_file():
        return {}
    saved = read_mapping_file(path, "the results file")
    if saved.get("benchmark") != benchmark or not is_over_seeds(saved):
        raise ValueError(f"{path} holds a run of another kind ({saved.get('benchmark')!r}); use another --output-dir")
    return saved


def _recorded(root: Path, benchmark: str, seeds: list[int]) -> dict:
    """The record in `root`, checked against `seeds`: they include every recorded seed (more seeds, or a re-run)
    or share none of them (a seed run beside the others)."""
    saved = _record_file(root, benchmark)
    recorded = {int(s) for s in saved.get("per_seed", {})}
    if not recorded <= set(seeds) and recorded & set(seeds):
        raise ValueError(
            f"{root / 'results.json'} holds seeds {[str(s) for s in sorted(recorded)]}; --seeds gives {seeds} (give "
            "every recorded seed, to add seeds or re-run them; or only new seeds, to run them beside the others)"
        )
    return saved


def _with_seeds_recorded_beside(root: Path, benchmark: str, per_seed: dict, ours: list[int]) -> dict:
    """`per_seed` with every seed but `ours` as OUTPUT/results.json has it now (another process may have added
    or re-run it since this run began), in the order of the seeds' numbers."""
    latest = _record_file(root, benchmark).get("per_seed", {})
    merged = {**per_seed, **{s: r for s, r in latest.items() if s not in {str(seed) for seed in ours}}}
    return dict(sorted(merged.items(), key=lambda item: int(item[0])))


def run_over_seeds(
    settings: Any,
    output_dir: str | Path,
    seeds: list[int],
    run_one: Callable[[Any, Path], dict],
    markdown: Callable[[dict], str],
    benchmark: str,
    log: Callable[[str], None] = print,
) -> dict:
    """Run `run_one(settings with seed S, OUTPUT/seed-S)` for each seed of `seeds` in turn (each resumes on its
    own) and write OUTPUT/results.json and results.md (`markdown` of the record) after each; the record. A
    re-run into OUTPUT (rows added, or seeds) keeps the recorded seeds' results until each returns anew, and
    the commands that made them."""
    root = Path(output_dir)
    saved = _recorded(root, benchmark, seeds)
    make_dirs(root)
    config = {k: v for k, v in settings.to_dict().items() if k != "seed"}
    recorded, this_command = saved.get("provenance", []), provenance()
    made_by = recorded if this_command in recorded else [*recorded, this_command]
    record = {
        "benchmark": benchmark,
        "seeds": seeds,
        "config": config,
        "per_seed": dict(saved.get("per_seed", {})),  # until a seed's re-run returns, its recorded results stand
        "provenance": made_by,
    }
    for index, seed in enumerate(seeds):
        log(f"\n=== seed {seed} ({index + 1} of {len(seeds)}) in {seed_dir(root, seed)}")
        run_dir = make_dirs(seed_dir(root, seed), root)  # a real folder of OUTPUT, not a link out of it
        record["per_seed"][str(seed)] = run_one(dataclasses.replace(settings, seed=seed), run_dir)
        record["per_seed"] = _with_seeds_recorded_beside(root, benchmark, record["per_seed"], seeds[: index + 1])
        record["seeds"] = [int(s) for s in record["per_seed"]]
        write_json_atomic(root / "results.json", record)
        write_text_atomic(root / "results.md", markdown(record))
    return record
