"""`posformer generate`: continue a prompt with a posformer or Hugging Face checkpoint."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.utils.limits import MAX_BEAMS, MAX_SEED, MAX_VOCAB
from posformer.utils.options import option

MAX_NEW_TOKENS = 1_000_000  # far beyond a useful continuation; its KV cache alone fills a machine's memory


@dataclass
class GenerateOptions:
    """The options of `posformer generate`."""

    model: str = option(help="model directory (or a Hub id when online)")
    prompt: str = option("\n", "text to continue (default: a newline)")
    max_new_tokens: int = option(
        200, "tokens generated after the prompt, at most 1,000,000", minimum=0, maximum=MAX_NEW_TOKENS
    )
    num_beams: int | None = option(
        None,
        "beam search with this many beams (default: the model's generation_config.json, else 1: no beam search)",
        minimum=1,
        maximum=MAX_BEAMS,
    )
    temperature: float | None = option(
        None,
        "sampling temperature: > 0 samples, 0 decodes greedily; default: as the model's generation_config.json says, "
        "else greedy (as Hugging Face's generate: the same tokens as model.generate() with no options)",
        low=0,
    )
    top_k: int | None = option(None, "sample from the k likeliest tokens", minimum=0, maximum=MAX_VOCAB)
    top_p: float | None = option(None, "nucleus sampling mass, in (0, 1]", low=0, high=1, low_open=True)
    seed: int = option(0, "seed of the sampler", minimum=0, maximum=MAX_SEED)


def cmd_generate(args: argparse.Namespace) -> int:
    import torch

    from posformer.loading import load_model, load_text_tokenizer

    options = options_from_args(GenerateOptions, args)
    model = load_model(options.model)
    tokenizer = load_text_tokenizer(options.model)
    prompt = torch.tensor([tokenizer.encode(options.prompt)])
    decoding = dict(
        max_new_tokens=options.max_new_tokens,
        num_beams=options.num_beams,
        top_k=options.top_k,
        top_p=options.top_p,
        generator=torch.Generator().manual_seed(options.seed),
    )
    if options.num_beams is not None and options.num_beams > 1:
        decoding["do_sample"] = False
    elif options.temperature is not None:
        decoding.update(do_sample=options.temperature > 0, temperature=options.temperature or None)
    elif model.generation_config.do_sample:
        print(
            f"sampling, as {options.model}'s generation_config.json says: --temperature 0 decodes greedily",
            file=sys.stderr,
        )
    out = model.generate(prompt, **decoding)[0].tolist()
    print(tokenizer.decode(out if model.cfg.arch == "decoder" else out[1:]))
    return 0


COMMAND = Command(
    "generate",
    help="continue a prompt with a posformer or Hugging Face checkpoint",
    description="Continue a prompt with a model directory: a posformer checkpoint (`posformer train`, "
    "`posformer convert`) or a Hugging Face one (config.json + weights + tokenizer). Decoding "
    "runs on the KV cache: greedy by default, as Hugging Face's generate, unless the model's generation_config.json "
    "says otherwise; sampling at --temperature > 0, beam search with --num-beams > 1. An encoder-decoder model "
    "(T5, Marian) reads the prompt as its input.",
    add_arguments=lambda parser: add_option_flags(parser, GenerateOptions),
    run=cmd_generate,
)
