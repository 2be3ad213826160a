"""Measure `pf.load` of a training run directory: the files it opens, the bytes it hashes, the seconds it takes.

    .venv/bin/python docs/results/measure_load_run_dir.py [--run-dir DIR]   # DIR is built first when absent

The run is written by the real trainer (`posformer train`, 2 steps of a 4-layer, d_model 256 decoder), then its
checkpoint is written again by the real checkpoint writer (`CheckpointManager.save`) with its trainer state padded
by one extra tensor, so that trainer_state.pt is 10x model.safetensors. Files opened are counted from the
operating system's side (`strace -e trace=openat`, so safetensors' own reads count too) in a fresh process; bytes
hashed by wrapping `hashlib.sha256`; seconds are the median of three fresh processes (files in the page cache).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

STATE_TO_WEIGHTS = 10
MODEL = {"arch": "decoder", "d_model": 256, "n_layers": 4, "n_heads": 4, "d_ff": 1024, "position": "rope"}


def build(run_dir: Path) -> None:
    """Train 2 steps into `run_dir`, then rewrite its checkpoint with the trainer state padded to 10x the weights."""
    import torch
    from safetensors.torch import load_file

    from posformer.cli import main
    from posformer.data.text import default_corpus, read_text
    from posformer.train.training_checkpoint import STATE_FILE, CheckpointManager

    corpus = run_dir.parent / "corpus.txt"
    corpus.write_text(read_text(default_corpus())[:20_000])
    trainer = {"steps": 2, "batch_size": 4, "warmup": 1, "eval_every": 2, "eval_batches": 1, "keep_last": 1}
    config = {"model": MODEL, "data": {"train": [str(corpus)], "seq_len": 32}, "trainer": {**trainer, "device": "cpu"}}
    (run_dir.parent / "run.yaml").write_text(yaml.safe_dump(config))
    args = ["train", "--config", str(run_dir.parent / "run.yaml"), "--output-dir", str(run_dir), "--no-progress"]
    assert main(args) == 0
    manager = CheckpointManager(run_dir, keep_last=1)
    newest = manager.checkpoints()[0]
    weights_bytes = (newest.path / "model.safetensors").stat().st_size
    state = torch.load(newest.path / STATE_FILE, map_location="cpu", weights_only=True)
    state_bytes = (newest.path / STATE_FILE).stat().st_size
    state["padding"] = torch.zeros(max(0, STATE_TO_WEIGHTS * weights_bytes - state_bytes) // 4)
    keep = ("model.safetensors", "config.json", STATE_FILE, "manifest.json")
    extra = {p.name: p.read_text() for p in newest.path.iterdir() if p.name not in keep}
    config_json = (newest.path / "config.json").read_text()
    manager.save(newest.step, load_file(newest.path / "model.safetensors"), config_json, state, extra)


def load_once(run_dir: Path) -> None:
    """In this process: `pf.load(run_dir)` timed, with `hashlib.sha256` counting the bytes it digests."""
    real = hashlib.sha256
    hashed = Counter()

    class Counted:
        def __init__(self, data: bytes = b"") -> None:
            self.inner = real()
            self.update(data)

        def update(self, data: bytes) -> None:
            hashed["bytes"] += len(data)
            self.inner.update(data)

        def hexdigest(self) -> str:
            return self.inner.hexdigest()

    import posformer as pf

    hashlib.sha256 = Counted
    start = time.perf_counter()
    pf.load(run_dir)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "bytes_hashed": hashed["bytes"]}))


def child(run_dir: Path, strace_log: Path | None = None) -> dict:
    command = [sys.executable, __file__, "--load", str(run_dir)]
    if strace_log is not None:
        command = ["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(strace_log), *command]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def opened(strace_log: Path, run_dir: Path) -> Counter:
    """How many times each file under `run_dir` was opened successfully (directories left out)."""
    counts = Counter()
    root = str(run_dir.resolve())
    for line in strace_log.read_text().splitlines():
        found = re.search(r'openat\(AT_FDCWD, "([^"]+)", ([A-Z_|]+)[^)]*\) = (\d+)', line)
        if found and found.group(1).startswith(root) and "O_DIRECTORY" not in found.group(2):
            counts[found.group(1)[len(root) + 1 :]] += 1
    return counts


def report(run_dir: Path) -> None:
    sizes = {p.relative_to(run_dir).as_posix(): p.stat().st_size for p in sorted(run_dir.rglob("*")) if p.is_file()}
    print("run dir files (bytes):")
    for name, size in sizes.items():
        print(f"  {size:>12,}  {name}")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "strace.log"
        counted = child(run_dir.resolve(), log)
        opens = opened(log, run_dir)
    seconds = [child(run_dir.resolve())["seconds"] for _ in range(3)]
    print("files opened by pf.load (times):")
    for name, times in sorted(opens.items()):
        print(f"  {times}  {name}")
    print(f"files opened: {len(opens)} distinct, {sum(opens.values())} opens")
    print(f"optimizer state opened: {any(name.endswith('trainer_state.pt') for name in opens)}")
    print(f"bytes hashed: {counted['bytes_hashed']:,}")
    print(f"seconds (median of 3 fresh processes): {statistics.median(seconds):.3f}  {[round(s, 3) for s in seconds]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="the run dir to measure, built there first when absent")
    parser.add_argument("--load", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load is not None:
        load_once(args.load)
        return
    if args.run_dir is not None:
        if not args.run_dir.exists():
            build(args.run_dir)
        report(args.run_dir)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        build(run_dir)
        report(run_dir)


if __name__ == "__main__":
    main()
