"""Where a passkey read past L goes wrong: answer token by answer token, and where the last question token attends.

    .venv/bin/python docs/results/probe_passkey_depth.py RUN/rows/rope [--train-len 128] [--keys 20]
        [--lengths 1 2] [--scaling yarn]

For each length (by default L and 2L; `--lengths` in multiples of L) and depth (0.75, 1), the model as trained or,
with `--scaling`, with its RoPE rescaled for that length as the `retrieval` preset's rope+yarn row is (factor
length / L, the same weights): the same random keys as prompts of `experiments.passkey`; the number
of keys whose k-th answer token the model's argmax gets right (teacher-forced, as the passkey score), and, per
layer, the attention of the last question token (where the first answer token is predicted), averaged over heads
and keys, on the key line, on the tokens more than L back, and on the first four tokens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import posformer as pf
from posformer.experiments.extrapolation.experiment import rescaled
from posformer.experiments.passkey import passkey_prompt, random_keys
from posformer.loading import load_text_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--train-len", type=int, default=128)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--scaling", default=None, help="a RoPE context-extension method, e.g. yarn")
    args = parser.parse_args()
    trained = pf.load(args.run).eval()
    tokenizer = load_text_tokenizer(args.run)
    keys = random_keys(args.keys, 7)
    window = args.train_len
    with torch.no_grad():
        for length in (multiple * window for multiple in args.lengths):
            model = trained if args.scaling is None else rescaled(trained, args.scaling, length, window).eval()
            for depth in (0.75, 1.0):
                right = torch.zeros(0, dtype=torch.long)
                key_mass, far_mass, first_mass = (torch.zeros(model.cfg.n_layers) for _ in range(3))
                for key in keys:
                    prompt = passkey_prompt(tokenizer.encode, length, depth, key)
                    if prompt is None:
                        raise ValueError(f"a passkey prompt does not fit {length} tokens")
                    out = model(prompt.ids[None], output_attentions=True)
                    at = torch.arange(prompt.answer_start - 1, len(prompt.ids) - 1)
                    hits = (out.logits[0, at].argmax(-1) == prompt.ids[at + 1]).int()
                    right = hits if right.numel() == 0 else right + hits  # (answer tokens,)
                    question = prompt.answer_start - 1
                    for layer, weights in enumerate(out.attentions):
                        row = weights[0, :, question].float().mean(0)
                        key_mass[layer] += row[prompt.key_start : prompt.key_end].sum() / len(keys)
                        far_mass[layer] += row[: max(0, question - window + 1)].sum() / len(keys)
                        first_mass[layer] += row[:4].sum() / len(keys)
                print(f"length {length}, depth {depth}: answer tokens right (of {len(keys)}): {right.tolist()}")
                for name, mass in (("key line", key_mass), (f"> {window} back", far_mass), ("first 4", first_mass)):
                    print(f"  attention on {name}, by layer: {[round(float(m), 2) for m in mass]}")


if __name__ == "__main__":
    main()
