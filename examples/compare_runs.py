"""Two `posformer extrapolate` runs on the same text, compared: ppl(a) / ppl(b) of each row at each length with its
95% paired bootstrap interval over the evaluation blocks. What docs/longeval.md uses to price a training mix (the
retrieval source against the same model trained on text alone).

    python examples/compare_runs.py runs/src128 runs/base128

Both runs must have scored the same blocks: the same corpus, held-out books, tokenizer and eval_tokens (the same
`extrapolate` settings but the mixes); the script refuses runs whose blocks differ in number or token counts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from posformer.experiments.extension.report import ratio_cell


def load(run: Path) -> dict:
    path = run / "results.json"
    if not path.is_file():
        raise SystemExit(f"compare_runs: {path} not found: give an output directory of `posformer extrapolate`")
    return json.loads(path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="the run whose perplexity is the numerator")
    parser.add_argument("b", type=Path, help="the run it is compared with")
    args = parser.parse_args()
    a, b = load(args.a), load(args.b)
    for row in sorted(set(a["rows"]) & set(b["rows"])):
        for eval_set, by_length in a["rows"][row]["blocks"].items():
            other = b["rows"][row]["blocks"].get(eval_set, {})
            print(f"{row}, {eval_set}: ppl({args.a.name}) / ppl({args.b.name}) [95% paired interval]")
            for length, blocks in by_length.items():
                if length not in other:
                    continue
                if blocks["count"] != other[length]["count"]:
                    raise SystemExit(f"compare_runs: {eval_set} at {length}: the runs scored different blocks")
                ratio = a["rows"][row]["ppl"][eval_set][length] / b["rows"][row]["ppl"][eval_set][length]
                print(f"  {length:>6}: {ratio_cell(ratio, blocks, other[length])}")


if __name__ == "__main__":
    main()
