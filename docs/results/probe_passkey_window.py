"""Which queries' attention past L breaks a passkey read at 2L: window attention applied to some queries only.

    .venv/bin/python docs/results/probe_passkey_window.py RUN/rows/rope [--train-len 128] [--keys 20]

The RoPE model is read at 2L with the encoding `streaming` without sinks (window attention: each query sees its
last L tokens, at its trained distances), but the window's mask is kept only on the chosen queries and layers;
every other query sees all keys, as unchanged RoPE does. For depths 0.5, 0.75 and 1 and each choice: the passkey
exact match and the share of answer tokens right (teacher-forced, as the passkey score; the same keys as
`probe_passkey_depth.py`). Queries: "answer" are those that predict the answer's tokens (the last question token
and the answer's own), "key line" the key line's tokens, "context" every other one.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

import posformer as pf
from posformer.experiments.extension.methods import extended_params, with_params
from posformer.experiments.passkey import PasskeyPrompt, passkey_prompt, random_keys, retrieval
from posformer.loading import TextTokenizer, load_text_tokenizer
from posformer.model import Transformer
from posformer.positions.streaming import Streaming

Chooser = Callable[[PasskeyPrompt], Tensor]  # prompt -> (T,) bool: the queries that keep the window's mask


def answer_queries(prompt: PasskeyPrompt) -> Tensor:
    rows = torch.zeros(len(prompt.ids), dtype=torch.bool)
    rows[prompt.answer_start - 1 :] = True
    return rows


def key_line_queries(prompt: PasskeyPrompt) -> Tensor:
    rows = torch.zeros(len(prompt.ids), dtype=torch.bool)
    rows[prompt.key_start : prompt.key_end] = True
    return rows


def every_query(prompt: PasskeyPrompt) -> Tensor:
    return torch.ones(len(prompt.ids), dtype=torch.bool)


def no_query(prompt: PasskeyPrompt) -> Tensor:
    return torch.zeros(len(prompt.ids), dtype=torch.bool)


def context_queries(prompt: PasskeyPrompt) -> Tensor:
    return ~(answer_queries(prompt) | key_line_queries(prompt))


def windowed_model(model: Transformer, train_len: int, length: int) -> tuple[Transformer, Streaming]:
    """The model with window attention of train_len (sinks 0), and its `streaming` encoding module."""
    params = extended_params(model, "window", length, train_len)
    windowed = with_params(model, params, length, position="streaming").eval()
    (encoding,) = {id(m): m for m in windowed.modules() if isinstance(m, Streaming)}.values()
    return windowed, encoding


def read(
    model: Transformer, encoding: Streaming, prompt: PasskeyPrompt, rows: Tensor, layers: set[int]
) -> tuple[bool, float]:
    """(exact match, share of answer tokens right) of `retrieval`, the window's mask kept on `rows` of `layers`."""
    plain_bias = type(encoding).bias

    def bias(q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        out = plain_bias(encoding, q, k, q_pos, k_pos, layer)  # (B, H, Tq, Tk): 0 or the dtype's min (hidden)
        keep = rows[q_pos[0]] if layer in layers else torch.zeros(q_pos.shape[-1], dtype=torch.bool)
        return out.masked_fill(~keep[None, None, :, None], 0.0)

    encoding.bias = bias  # type: ignore[method-assign]
    try:
        exact, right = retrieval(model, [prompt])
    finally:
        del encoding.bias
    return bool(exact[0]), float(right[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--train-len", type=int, default=128)
    parser.add_argument("--keys", type=int, default=20)
    args = parser.parse_args()
    source = pf.load(args.run).eval()
    tokenizer = load_text_tokenizer(args.run)
    keys = random_keys(args.keys, 7)
    length = 2 * args.train_len
    model, encoding = windowed_model(source, args.train_len, length)
    every_layer = set(range(model.cfg.n_layers))
    choices: list[tuple[str, Chooser, set[int]]] = [
        ("unchanged RoPE (no query windowed)", no_query, every_layer),
        ("window attention (every query)", every_query, every_layer),
        ("answer queries only", answer_queries, every_layer),
        ("key line queries only", key_line_queries, every_layer),
        ("context queries only", context_queries, every_layer),
        ("all but the answer queries", lambda p: ~answer_queries(p), every_layer),
    ]
    choices += [(f"every query, layer {layer} only", every_query, {layer}) for layer in sorted(every_layer)]
    choices.append(("answer queries, layer 0 only", answer_queries, {0}))
    print(f"length {length} (L = {args.train_len}), {len(keys)} keys: exact match / answer tokens right")
    print("| queries windowed | depth 0.5 | depth 0.75 | depth 1 |")
    print("|---|---:|---:|---:|")
    with torch.no_grad():
        for name, chooser, layers in choices:
            cells = []
            for depth in (0.5, 0.75, 1.0):
                exact, tokens = 0, 0.0
                for key in keys:
                    prompt = passkey_prompt(tokenizer.encode, length, depth, key)
                    if prompt is None:
                        raise ValueError(f"a passkey prompt does not fit {length} tokens")
                    hit, share = read(model, encoding, prompt, chooser(prompt), layers)
                    exact += int(hit)
                    tokens += share / len(keys)
                cells.append(f"{exact / len(keys):.2f} / {tokens:.2f}")
            print(f"| {name} | " + " | ".join(cells) + " |")
        for read_length in (args.train_len, length):
            print_answer_attention(source, tokenizer, keys, read_length, args.train_len)


def print_answer_attention(
    model: Transformer, tokenizer: TextTokenizer, keys: list[str], length: int, window: int
) -> None:
    """Per layer, the unchanged model's attention of the answer queries (averaged over heads, queries and keys)
    on the key line and on the tokens more than `window` back of each query."""
    print(f"\nunchanged RoPE at {length}: answer queries' attention by layer, key line / more than {window} back")
    for depth in (0.5, 0.75, 1.0):
        key_mass = far_mass = torch.zeros(model.cfg.n_layers)
        for key in keys:
            prompt = passkey_prompt(tokenizer.encode, length, depth, key)
            assert prompt is not None
            queries = torch.arange(prompt.answer_start - 1, len(prompt.ids) - 1)
            far = queries[:, None] - torch.arange(len(prompt.ids))[None, :] >= window  # (answer queries, T)
            attentions = model(prompt.ids[None], output_attentions=True).attentions
            weights = torch.stack([a[0, :, queries].float().mean(0) for a in attentions])  # (layers, queries, T)
            key_mass = key_mass + weights[..., prompt.key_start : prompt.key_end].sum(-1).mean(-1) / len(keys)
            far_mass = far_mass + (weights * far).sum(-1).mean(-1) / len(keys)
        cells = [f"{float(k):.2f} / {float(f):.2f}" for k, f in zip(key_mass, far_mass)]
        print(f"depth {depth}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
