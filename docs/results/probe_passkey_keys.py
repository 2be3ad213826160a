"""Which keys a model reads: passkey exact match by the shape of the key, at L, 2L, 4L and 8L.

    .venv/bin/python docs/results/probe_passkey_keys.py RUN/rows/ROW [--train-len 128] [--keys 300]

A model that copies a key by content alone, writing after each digit the digit that followed it in the key line,
cannot tell two occurrences of a digit apart: it fails exactly the keys in which one digit is followed by two
different digits ("ambiguous", e.g. 46044: 4 is followed by 6 and by 4). The keys (5 digits, each its own token
in the preset's BPE) are split into: all digits distinct; a digit recurs but each digit has one successor in the
key (e.g. 24933, 34101); ambiguous. Prompts of `experiments.passkey` at depth 0.5, scored teacher-forced as the
passkey score (at 2L the key line straddles the last L tokens, at 4L and 8L it lies further back); the keys
from one seeded draw (seed 123), so not the preset's evaluation keys.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import posformer as pf
from posformer.experiments.passkey import passkey_prompt, random_keys, retrieval
from posformer.loading import load_text_tokenizer

SHAPES = ("distinct digits", "a digit recurs, one successor each", "ambiguous: a digit with two successors")


def key_shape(key: str) -> str:
    """One of SHAPES for a key of digits."""
    if len(set(key)) == len(key):
        return SHAPES[0]
    successors: dict[str, set[str]] = {}
    for digit, following in zip(key, key[1:]):
        successors.setdefault(digit, set()).add(following)
    return SHAPES[2] if any(len(after) > 1 for after in successors.values()) else SHAPES[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--train-len", type=int, default=128)
    parser.add_argument("--keys", type=int, default=300)
    args = parser.parse_args()
    model = pf.load(args.run).eval()
    tokenizer = load_text_tokenizer(args.run)
    keys = random_keys(args.keys, 123)
    lengths = tuple(factor * args.train_len for factor in (1, 2, 4, 8))
    right: dict[tuple[str, int], int] = {}
    for length in lengths:
        prompts = [passkey_prompt(tokenizer.encode, length, 0.5, key) for key in keys]
        if any(prompt is None for prompt in prompts):
            raise ValueError(f"a passkey prompt does not fit {length} tokens")
        with torch.no_grad():
            exact, _ = retrieval(model, [prompt for prompt in prompts if prompt is not None])
        for shape in SHAPES:
            right[shape, length] = sum(int(hit) for key, hit in zip(keys, exact) if key_shape(key) == shape)
    print(f"{args.run}: passkey exact match at depth 0.5 by the key's shape ({len(keys)} keys)")
    print("| key | keys | " + " | ".join(str(length) for length in lengths) + " |")
    print("|---|---:|" + "---:|" * len(lengths))
    for shape in SHAPES:
        count = sum(key_shape(key) == shape for key in keys)
        cells = [f"{right[shape, length] / count:.2f}" for length in lengths]
        print(f"| {shape} | {count} | " + " | ".join(cells) + " |")
    every = [f"{sum(right[shape, length] for shape in SHAPES) / len(keys):.2f}" for length in lengths]
    print(f"| every key | {len(keys)} | " + " | ".join(every) + " |")


if __name__ == "__main__":
    main()
