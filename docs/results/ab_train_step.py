"""The training step of an older commit against the checkout's, in one process, interleaved round by round.

    python docs/results/ab_train_step.py 2396299 none,alibi,t5 --rounds 7

`bench --positions` gives each encoding's time relative to `none` in one run; comparing two runs of two commits
compares two noisy medians of `none` as well. Here both versions run in the same process: the older commit's
package is extracted (`git archive`) and renamed `posformer_before` (its imports and its custom op's namespace
rewritten), each encoding's model is built by both from the same `bench --positions` config and seed, and every
round times one training step (forward with labels, backward, AdamW) of each, the order alternating. Printed per
encoding: the median seconds of each and after / before. Run from the repository root, with posformer installed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

SHAPE = dict(d_model=512, layers=4, heads=8, vocab=8192, d_ff=1376)


def extract_renamed(commit: str, into: Path) -> None:
    """src/posformer of `commit` as the package posformer_before under `into`."""
    archive = into / "src.tar"
    subprocess.run(["git", "archive", "-o", str(archive), commit, "src/posformer"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    package = into / "posformer_before"
    (into / "src" / "posformer").rename(package)
    for path in package.rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"\bposformer\.", "posformer_before.", text)
        text = re.sub(r"\bimport posformer\b", "import posformer_before", text)
        text = re.sub(r"\bfrom posformer import\b", "from posformer_before import", text)
        text = text.replace('"posformer::', '"posformer_before::')
        path.write_text(text)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="the older commit (before)")
    parser.add_argument("encodings", help="comma-separated encodings")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds after one untimed (default 7)")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the seconds and ratios here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        extract_renamed(args.commit, Path(tmp))
        sys.path.insert(0, tmp)
        import posformer_before
        from posformer_before.bench.positions import positions_config as config_before

        import posformer
        from posformer.bench.positions import positions_config as config_after

        builders = {"before": (posformer_before, config_before), "after": (posformer, config_after)}
        results = {}
        for name in args.encodings.split(","):
            runs = {}
            for side, (package, config) in builders.items():
                torch.manual_seed(0)
                model = package.Transformer(config(name, "decoder", length=args.length, **SHAPE))
                runs[side] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
            torch.manual_seed(1)
            ids = torch.randint(0, SHAPE["vocab"], (args.batch, args.length))
            seconds = {"before": [], "after": []}
            for round_ in range(args.rounds + 1):
                for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                    elapsed = train_step(*runs[side], ids)
                    if round_:
                        seconds[side].append(elapsed)
            before, after = (statistics.median(seconds[s]) for s in ("before", "after"))
            results[name] = {"before_s": before, "after_s": after, "ratio": after / before, "seconds": seconds}
            print(f"{name:20s} before {before:.3f} s  after {after:.3f} s  after / before {after / before:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"commit": args.commit, **vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
