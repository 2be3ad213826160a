"""Peak memory by length of every position encoding, beside `none` and beside Hugging Face's models of the same
encodings: what `posformer bench --memory` measures.

Each cell is one process (`posformer.bench.memory_probe`): it builds the model, then runs one no-grad forward or
one training step (forward, backward, AdamW) at the length, and reports the peak memory that step adds above the
built model. One process a cell, so that no measurement inherits another's allocator state. posformer's models
are the llama preset's parts at the given shape, one per encoding (as `bench --positions`); the peers are
Hugging Face's T5 encoder (t5), BLOOM (alibi), Llama (rope) and BERT with relative_key, at the same shape.

    posformer bench --memory --help
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from posformer import positions
from posformer.bench.benchmark_options import MMAP_THRESHOLD, MemoryOptions
from posformer.bench.memory_probe import PEERS
from posformer.bench.positions import check_rows, default_rows
from posformer.experiments.mechanism_rows import row_base
from posformer.utils.options import check_options
from posformer.utils.progress import progress_bar
from posformer.utils.safe_write import write_json_atomic

BASELINE = "none"
CHECKPOINTED = {"posformer": "checkpointed", "hf": "hf checkpointed"}  # a model kind -> the same, checkpointed


def run(options: MemoryOptions) -> dict[str, Any]:
    """Measure every cell; the result holds the setup and `cells`: [{model, encoding, phase, length, peak_mb,
    seconds} or {..., error}], in the order measured."""
    check_options(options)
    names = [BASELINE] + [n for n in (options.encodings or default_rows("decoder")) if n != BASELINE]
    check_rows(names)
    shape = dict(
        d_model=options.d_model, layers=options.layers, heads=options.heads, d_ff=options.d_ff, vocab=options.vocab
    )
    models = [("posformer", name) for name in names]
    if options.whole_bias:
        models += [("whole", name) for name in names if positions.get(row_base(name)).adds_bias]
    models += [("hf", name) for name in names if options.peers and name in PEERS]
    if options.activation_checkpointing:
        models += [(CHECKPOINTED[m], e) for m, e in models if m in CHECKPOINTED]
    cells = [
        (m, e, phase, n)
        for phase in options.phases
        for m, e in models
        for n in options.lengths
        if phase == "train" or m not in CHECKPOINTED.values()
    ]
    result = {"shape": shape, "batch": options.batch, "device": options.device, "threads": options.threads}
    result["release_freed"] = options.release_freed
    result.update(lengths=list(options.lengths), phases=list(options.phases), cells=[])
    for model, encoding, phase, length in progress_bar(cells, desc="memory", unit="cell", disable=not options.progress):
        spec = dict(model=model, encoding=encoding, phase=phase, length=length, shape=shape, batch=options.batch)
        spec.update(device=options.device, threads=options.threads)
        result["cells"].append({**spec, **_probe(spec, options.timeout, options.release_freed)})
        if options.json:  # a long run stopped midway keeps the cells it measured
            write_json_atomic(options.json, {**result, "unfinished": len(cells) - len(result["cells"])})
    if options.plot:
        from posformer.plots.memory import draw_memory

        result["plot"] = str(draw_memory(result, options.plot))
    return result


def _probe(spec: dict[str, Any], timeout: int, release_freed: bool = False) -> dict[str, Any]:
    """One cell in its own process: {peak_mb, seconds} or {error}."""
    command = [sys.executable, "-m", "posformer.bench.memory_probe", json.dumps(spec)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)} if release_freed else None
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout ({timeout} s)"}
    if done.returncode < 0:
        return {
            "error": f"killed by signal {-done.returncode} (out of memory?) after {time.perf_counter() - start:.0f} s"
        }
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {done.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def table(result: dict[str, Any], phase: str, value: str = "peak_mb") -> list[str]:
    """The markdown table of one phase: a row per model, its `value` per length ("peak_mb" or "seconds"), and x
    none at the longest length."""
    lengths = result["lengths"]
    cells = {(c["model"], c["encoding"], c["length"]): c for c in result["cells"] if c["phase"] == phase}
    rows = dict.fromkeys((m, e) for m, e, _ in cells)
    longest = lengths[-1]
    base = cells.get(("posformer", BASELINE, longest), {}).get(value)
    head = phase if value == "peak_mb" else f"{phase}, seconds"
    lines = [
        f"| {head} | " + " | ".join(f"T = {n:,}" for n in lengths) + f" | x none at {longest:,} |",
        "|---|" + "---:|" * (len(lengths) + 1),
    ]
    for model, encoding in rows:
        label = {
            "posformer": encoding,
            "whole": f"{encoding} whole",
            "hf": f"HF {encoding}",
            "checkpointed": f"{encoding} checkpointed",
            "hf checkpointed": f"HF {encoding} checkpointed",
        }[model]
        values = [_cell(cells.get((model, encoding, n)), value) for n in lengths]
        measured = cells.get((model, encoding, longest), {}).get(value)
        ratio = f"{measured / base:.2f}" if measured is not None and base else "n/a"
        lines.append(f"| {label} | " + " | ".join(values) + f" | {ratio} |")
    return lines


def _cell(cell: dict[str, Any] | None, value: str) -> str:
    if cell is None:
        return "-"
    if value not in cell:
        return cell["error"].split(" ")[0]
    return f"{cell[value]:,.0f} MB" if value == "peak_mb" else f"{cell[value]:,.1f}"


def format_report(result: dict[str, Any]) -> str:
    shape = result["shape"]
    lines = [
        f"peak memory above the built model, {result['device']}, threads {result['threads']}; batch "
        f"{result['batch']}, d_model {shape['d_model']}, {shape['layers']} layers, {shape['heads']} heads, d_ff "
        f"{shape['d_ff']}, vocab {shape['vocab']}; one process per cell"
        + (f", MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD}" if result.get("release_freed") else ""),
        "",
    ]
    for phase in result["phases"]:
        lines += table(result, phase) + [""] + table(result, phase, "seconds") + [""]
    lines.append(
        "forward: one no-grad forward; train: forward, backward and an AdamW step. The code: posformer.bench.memory."
    )
    if result.get("plot"):
        lines.append(f"figure: {result['plot']}")
    return "\n".join(lines)
