"""`posformer generate`: continue a prompt with a posformer or Hugging Face checkpoint."""

from __future__ import annotations

import argparse

from posformer.cli.arg_types import non_negative_float, non_negative_int, open_fraction, positive_int
from posformer.cli.command import Command


def cmd_generate(args: argparse.Namespace) -> int:
    import torch

    from posformer.loading import load_model, load_text_tokenizer

    model = load_model(args.model)
    tokenizer = load_text_tokenizer(args.model)
    prompt = torch.tensor([tokenizer.encode(args.prompt)])
    options = dict(max_new_tokens=args.max_new_tokens)
    if args.num_beams > 1:
        options["num_beams"] = args.num_beams
    elif args.temperature > 0:
        options.update(
            do_sample=True,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            generator=torch.Generator().manual_seed(args.seed),
        )
    out = model.generate(prompt, **options)[0].tolist()
    print(tokenizer.decode(out if model.cfg.arch == "decoder" else out[1:]))
    return 0


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="model directory (or a Hub id when online)")
    parser.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    parser.add_argument("--max-new-tokens", dest="max_new_tokens", type=non_negative_int, default=200)
    parser.add_argument(
        "--num-beams",
        dest="num_beams",
        type=positive_int,
        default=1,
        help="beam search with this many beams (default: 1, no beam search)",
    )
    parser.add_argument(
        "--temperature", type=non_negative_float, default=0.8, help="0 means greedy decoding (default: 0.8)"
    )
    parser.add_argument(
        "--top-k", dest="top_k", type=non_negative_int, default=None, help="sample from the k likeliest tokens"
    )
    parser.add_argument(
        "--top-p", dest="top_p", type=open_fraction, default=None, help="nucleus sampling mass, in (0, 1]"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the sampler (default: 0)")


COMMAND = Command(
    "generate",
    help="continue a prompt with a posformer or Hugging Face checkpoint",
    description="Continue a prompt with a model directory: a posformer checkpoint (`posformer train`, "
    "`posformer convert`) or a Hugging Face one (config.json + weights + tokenizer). Decoding "
    "runs on the KV cache: sampling when --temperature > 0, greedy at 0, beam search with "
    "--num-beams > 1. An encoder-decoder model (T5, Marian) reads the prompt as its input.",
    add_arguments=add_generate_arguments,
    run=cmd_generate,
)
