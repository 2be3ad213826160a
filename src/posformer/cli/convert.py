"""`posformer convert`: Hugging Face checkpoint -> posformer checkpoint, and back."""

from __future__ import annotations

import argparse

from posformer.cli.command import Command


def cmd_convert(args: argparse.Namespace) -> int:
    from pathlib import Path

    from posformer.checkpoints.native import load_pretrained, save_pretrained
    from posformer.hf import from_hf, to_hf
    from posformer.hf.hf_checkpoint import resolve
    from posformer.loading import copy_tokenizer_files

    if (args.from_hf is None) == (args.to_hf is None):
        raise ValueError(
            "give exactly one of --from-hf DIR (Hugging Face -> posformer) or --to-hf DIR (posformer -> Hugging Face)"
        )
    out = Path(args.out)
    if args.from_hf is not None:
        source = resolve(args.from_hf)
        model = from_hf(source)
        save_pretrained(model, out)
    else:
        source = Path(args.to_hf)
        model = load_pretrained(source)
        to_hf(model, out, rope_parameters=args.rope_parameters)
    copied = copy_tokenizer_files(source, out, hf_only=args.to_hf is not None)
    print(
        f"wrote {out}: {model.cfg.hf_model_type or 'posformer'} model, {model.num_parameters():,} parameters"
        f"{'; tokenizer files: ' + ', '.join(copied) if copied else '; no tokenizer files'}"
    )
    return 0


def add_convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-hf", dest="from_hf", metavar="DIR", help="Hugging Face checkpoint dir (or Hub id)")
    parser.add_argument("--to-hf", dest="to_hf", metavar="DIR", help="posformer checkpoint dir")
    parser.add_argument(
        "--rope-parameters",
        dest="rope_parameters",
        action="store_true",
        help="with --to-hf: write RoPE settings in transformers v5's rope_parameters form "
        "(default: v4's rope_theta and rope_scaling, which transformers 4.x reads)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (created if needed)")


COMMAND = Command(
    "convert",
    help="convert between Hugging Face and posformer checkpoints",
    description="--from-hf DIR: read a Hugging Face checkpoint (config.json + safetensors or .bin, sharded "
    "or not) and write a posformer checkpoint. --to-hf DIR: write a posformer checkpoint as a "
    "Hugging Face one that transformers' from_pretrained loads. Tokenizer files are copied.",
    add_arguments=add_convert_arguments,
    run=cmd_convert,
)
